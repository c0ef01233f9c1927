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
  grid_ = pp::make_pipeline_grid(world_, stages);
  pp::PipelineOptions po;
  po.schedule = pp::parse_schedule(options.pipeline_schedule);
  po.micro_batches = static_cast<int>(options.micro_batches);
  // Cuts balanced by each layer's measured cost on one micro-batch (world
  // rank 0 measures and broadcasts, so every rank cuts alike).
  const int64_t micro = std::max<int64_t>(1, options.batch_size / options.micro_batches);
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
}

PipelineStrategy::~PipelineStrategy() = default;

int PipelineStrategy::data_replicas() const { return grid_.dp ? grid_.dp->size() : 1; }

int PipelineStrategy::data_rank() const { return grid_.dp ? grid_.dp->rank() : 0; }

bool PipelineStrategy::data_rank_counts() const { return grid_.pp->rank() == 0; }

double PipelineStrategy::step(const data::Batch& batch, const std::function<void(double)>& check) {
  opt_->zero_grad();
  const ModelKind kind = options_.model;
  const double l = pipe_->step(
      batch.input, batch.target,
      [kind](const Tensor& out, const Tensor& target) { return compute_loss(kind, out, target); });
  check(l);
  if (const double clip = clip_max_norm(kind); clip > 0) pipe_->clip_grad_norm(clip);
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
  for (const auto& [key, t] : opt_->state_dict()) {
    const int64_t i = optim::state_key_param_index(key);
    if (i >= 0 && opt_owner_.at(static_cast<size_t>(i)) == grid_.pp->rank()) own.insert(key, t);
  }
  std::vector<TensorDict> parts = gather_tensor_dicts(*grid_.pp, own, 0);
  if (grid_.pp->rank() != 0) return;
  TensorDict merged = opt_->state_dict();
  for (const TensorDict& part : parts) {
    for (const auto& [key, t] : part) merged.insert_or_assign(key, t.clone());
  }
  opt_->load_state_dict(merged);
}

int PipelineStrategy::threads() const { return num_threads(); }

std::string PipelineStrategy::layout() const {
  const int replicas = data_replicas();
  return fmt::format("pipeline {}: {} stages x {} replica{}, {} micro-batches",
                     options_.pipeline_schedule, grid_.pp->size(), replicas,
                     replicas == 1 ? "" : "s", options_.micro_batches);
}

}  // namespace cohort::train
