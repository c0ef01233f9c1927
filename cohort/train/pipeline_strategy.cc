#include "cohort/train/pipeline_strategy.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/parallel/pipeline/gpt_pipeline.h"
#include "cohort/train/tensor_dict_exchange.h"

namespace cohort::train {
namespace {

namespace pp = parallel::pipeline;

Tensor sample_input(const TrainOptions& options, int64_t n) {
  if (options.is_language_model())
    return Tensor::zeros({n, gpt_config(options).block_size}, kInt64);
  if (options.model == ModelKind::kToy) return Tensor::zeros({n, 10});
  return Tensor::zeros({n, 1, 28, 28});
}

}  // namespace

PipelineStrategy::PipelineStrategy(const TrainOptions& options,
                                   std::shared_ptr<distributed::ProcessGroup> world, Generator& gen)
    : TrainStrategy(world), options_(options), world_(std::move(world)) {
  COHORT_CHECK(world_ != nullptr,
               "--strategy pipeline needs a process group (run under cohort run)");
  const int stages = options.pipeline_stages > 0 ? options.pipeline_stages : world_->size();
  COHORT_CHECK(world_->size() % stages == 0,
               "--pipeline-stages {} does not divide the world of {} ranks (the world is "
               "stages x data-parallel replicas)",
               stages, world_->size());
  COHORT_CHECK(options.pipeline_zero_stage == 0 || world_->size() > stages,
               "--strategy pipeline --zero-stage {} shards each stage over its data-parallel "
               "replicas, but {} ranks in {} stages leave one replica; run more ranks than "
               "--pipeline-stages (a multiple of it), or drop --zero-stage",
               options.pipeline_zero_stage, world_->size(), stages);
  grid_ = pp::make_pipeline_grid(world_, stages);
  pp::PipelineOptions po;
  po.zero_stage = options.pipeline_zero_stage;
  po.schedule = pp::parse_schedule(options.pipeline_schedule);
  po.micro_batches = static_cast<int>(options.effective_micro_batches());
  // Cuts balanced by each layer's measured cost on one micro-batch (world
  // rank 0 measures and broadcasts, so every rank cuts alike).
  const int64_t micro = std::max<int64_t>(1, options.batch_size / po.micro_batches);
  po.sample_input = sample_input(options, micro);
  if (options.is_language_model()) {
    auto gpt = std::static_pointer_cast<nn::GPT>(make_model(options, gen));
    full_ = gpt;
    pipe_ = pp::make_gpt_pipeline(*gpt, grid_, po);
  } else {
    auto seq = make_sequential_model(options.model, gen);
    full_ = seq;
    pipe_ = std::make_unique<pp::Pipeline>(seq, grid_, po);
  }
  opt_ = make_optimizer(options, full_->parameters());

  // Which pipeline rank holds each parameter: a max-reduce of "mine or -1".
  std::set<std::string> mine;
  for (const auto& [name, p] : pipe_->named_parameters()) mine.insert(name);
  const auto all = full_->named_parameters();
  owner_.resize(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    owner_[i] = mine.count(all[i].first) ? grid_.pp->rank() : -1;
  }
  grid_.pp->all_reduce(owner_.data(), owner_.size(), distributed::DataType::kInt32,
                       {.op = distributed::ReduceOp::kMax});
  // The optimizer may group the parameters in another order (a GPT's decay
  // groups): its index -> the model's, by tensor.
  std::unordered_map<const TensorImpl*, int> owner_of;
  for (size_t i = 0; i < all.size(); ++i) owner_of[all[i].second.unsafe_impl()] = owner_[i];
  for (const optim::ParamGroup& g : opt_->param_groups())
    for (const Tensor& p : g.params) opt_owner_.push_back(owner_of.at(p.unsafe_impl()));
  if (pipe_->zero() != nullptr) make_sharded_optimizer();
}

void PipelineStrategy::make_sharded_optimizer() {
  // The full optimizer's groups, restricted to this rank's trainable
  // parameters and cut to their shards (a group with none here is left out).
  parallel::ShardedDataParallel& zero = *pipe_->zero();
  std::set<const TensorImpl*> here;
  for (const Tensor& p : pipe_->parameters())
    if (p.requires_grad()) here.insert(p.unsafe_impl());
  std::vector<optim::ParamGroup> shard_groups;
  size_t index = 0;
  const auto& groups = opt_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<Tensor> shards;
    for (const Tensor& p : groups[g].params) {
      if (here.count(p.unsafe_impl())) {
        shards.push_back(zero.shard_of(p));
        zopt_param_.push_back(index);
      }
      ++index;
    }
    if (shards.empty()) continue;
    zopt_group_.push_back(g);
    shard_groups.push_back({.params = std::move(shards), .options = groups[g].options});
  }
  COHORT_CHECK(!shard_groups.empty(),
               "--strategy pipeline --zero-stage {}: pipeline rank {} holds no trainable "
               "parameters (a stage of parameter-free layers); use fewer --pipeline-stages",
               options_.pipeline_zero_stage, grid_.pp->rank());
  auto opt = make_optimizer_over(options_.optimizer, std::move(shard_groups));
  zopt_ = std::make_unique<parallel::ShardedOptimizer>(zero, std::move(opt));
}

PipelineStrategy::~PipelineStrategy() = default;

int PipelineStrategy::data_replicas() const { return grid_.dp ? grid_.dp->size() : 1; }

int PipelineStrategy::data_rank() const { return grid_.dp ? grid_.dp->rank() : 0; }

bool PipelineStrategy::data_rank_counts() const { return grid_.pp->rank() == 0; }

double PipelineStrategy::step(const data::Batch& batch, const std::function<void(double)>& check) {
  if (zopt_)
    zopt_->zero_grad();
  else
    opt_->zero_grad();
  const ModelKind kind = options_.model;
  const double l = pipe_->step(
      batch.input, batch.target,
      [kind](const Tensor& out, const Tensor& target) { return compute_loss(kind, out, target); });
  check(l);
  if (const double clip = clip_max_norm(kind); clip > 0) pipe_->clip_grad_norm(clip);
  if (zopt_)
    zopt_->step();  // this rank's shards, then the parameters' all_gather over the replicas
  else
    opt_->step();
  return l;
}

void PipelineStrategy::sync_full_model(bool optimizer) {
  const auto params = full_->parameters();
  std::vector<distributed::Work> works;
  for (size_t i = 0; i < params.size(); ++i) {
    works.push_back(grid_.pp->broadcast(params[i], {.root = owner_[i]}, distributed::async_op));
  }
  for (auto& w : works) w.wait();
  if (!optimizer) return;
  // Pipeline rank 0 puts the optimizer state together: each rank sends the
  // state of its own parameters.
  TensorDict own;
  if (zopt_) {
    // The shards' state gathered over the replicas (collective over dp),
    // numbered as the full optimizer's.
    for (const auto& [key, t] : zopt_->full_state_dict()) {
      const int64_t i = optim::state_key_param_index(key);
      if (i < 0) continue;
      const std::string rest = key.substr(key.find('.', 6));
      own.insert(fmt::format("state.{}{}", zopt_param_.at(static_cast<size_t>(i)), rest), t);
    }
  } else {
    for (const auto& [key, t] : opt_->state_dict()) {
      const int64_t i = optim::state_key_param_index(key);
      if (i >= 0 && opt_owner_.at(static_cast<size_t>(i)) == grid_.pp->rank()) own.insert(key, t);
    }
  }
  std::vector<TensorDict> parts = gather_tensor_dicts(*grid_.pp, own, 0);
  if (grid_.pp->rank() != 0) return;
  TensorDict merged = opt_->state_dict();
  for (const TensorDict& part : parts) {
    for (const auto& [key, t] : part) merged.insert_or_assign(key, t.clone());
  }
  opt_->load_state_dict(merged);
}

void PipelineStrategy::after_resume() {
  if (!zopt_) return;  // the full optimizer is the one that steps
  // The loaded full state, renumbered as the shards' optimizer and cut to
  // this rank's chunks.
  const TensorDict full = opt_->state_dict();
  TensorDict mine;
  for (const auto& [key, t] : zopt_->optimizer().state_dict()) {
    const int64_t i = optim::state_key_param_index(key);
    const size_t dot = key.find('.', i >= 0 ? 6 : 13);  // after "state.N" / "param_groups.G"
    const std::string rest = key.substr(dot);
    if (i < 0) {
      const size_t g = std::stoul(key.substr(13, dot - 13));
      const Tensor* v = rest == ".params"
                            ? &t
                            : full.find(fmt::format("param_groups.{}{}", zopt_group_.at(g), rest));
      if (v != nullptr) mine.insert(key, *v);
    }
  }
  for (size_t j = 0; j < zopt_param_.size(); ++j) {
    const std::string prefix = fmt::format("state.{}.", zopt_param_[j]);
    for (const auto& [key, t] : full)
      if (key.rfind(prefix, 0) == 0)
        mine.insert(fmt::format("state.{}.{}", j, key.substr(prefix.size())), t);
  }
  zopt_->load_full_state_dict(mine);
}

int PipelineStrategy::threads() const { return num_threads(); }

std::string PipelineStrategy::layout() const {
  const int replicas = data_replicas();
  return fmt::format(
      "pipeline {}: {} stages x {} replica{}, {} micro-batches{}", options_.pipeline_schedule,
      grid_.pp->size(), replicas, replicas == 1 ? "" : "s", options_.effective_micro_batches(),
      zopt_
          ? fmt::format(", ZeRO stage {} over each stage's replicas", options_.pipeline_zero_stage)
          : std::string());
}

}  // namespace cohort::train
