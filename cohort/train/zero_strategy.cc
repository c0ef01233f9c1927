#include "cohort/train/zero_strategy.h"

#include "cohort/base/parallel.h"
#include "cohort/checkpoint/zero_checkpoint.h"

namespace cohort::train {

namespace {

// A GPT's blocks, else each child layer (every model's forward enters its
// layers through their hooks).
parallel::UnitPolicy unit_policy(ModelKind model) {
  if (model == ModelKind::kGpt || model == ModelKind::kGpt2)
    return parallel::module_type_policy({"Block"});
  return parallel::child_unit_policy();
}

}  // namespace

ZeroStrategy::ZeroStrategy(const TrainOptions& options,
                           std::shared_ptr<distributed::ProcessGroup> world, Generator& gen)
    : TrainStrategy(world), options_(options), world_(std::move(world)) {
  COHORT_CHECK(world_ != nullptr, "cohort train --strategy zero: needs a process group");
  model_ = make_model(options_, gen);
  // Initialised on the CPU (the same weights for a seed on every device),
  // then moved to this worker's device before ZeRO flattens and shards it.
  model_->to(options_.device);
  std::vector<Tensor> trainable;
  for (const Tensor& p : model_->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  full_opt_ = make_optimizer(options_, trainable);
  // HSDP: the model state is sharded over the shard group only.
  const int shard = options_.zero_shard_size == 0 ? world_->size() : options_.zero_shard_size;
  COHORT_CHECK(options_.checkpoint_format != "sharded" || shard == world_->size(),
               "--checkpoint-format sharded with --zero-shard-size {} of {} ranks (HSDP) is not "
               "supported: use --checkpoint-format whole",
               shard, world_->size());
  if (options_.zero_stage == 0) {
    options_.zero_stage = parallel::choose_zero_stage(model_->num_parameters(), shard,
                                                      options_.zero_memory_per_rank, &why_);
    why_ = "auto: " + why_;
  }
  zero_ = std::make_shared<parallel::ShardedDataParallel>(
      model_, world_,
      parallel::ZeroOptions{.stage = options_.zero_stage,
                            .unit_policy = unit_policy(options_.model),
                            .reduce_dtype = options_.grad_reduce == ComputePrecision::kBFloat16
                                                ? DType::kBFloat16
                                                : DType::kFloat32,
                            .hybrid_shard_size = options_.zero_shard_size});
  // --comm-hook bf16 with --grad-reduce bf16 is reduce_dtype's reduction already.
  if (options_.comm_hook && options_.grad_reduce != ComputePrecision::kBFloat16)
    zero_->register_comm_hook(make_zero_comm_hook(*options_.comm_hook));
  // The same kind and groups as the full optimizer, over the shards (the
  // groups are chosen from the full tensors' shapes, which shards lack).
  std::vector<optim::ParamGroup> groups = full_opt_->param_groups();
  for (optim::ParamGroup& g : groups)
    for (Tensor& p : g.params) p = zero_->shard_of(p);
  auto opt = make_optimizer_over(options_.optimizer, std::move(groups));
  opt_ = std::make_unique<parallel::ShardedOptimizer>(*zero_, std::move(opt));
}

double ZeroStrategy::step(const data::Batch& batch, const std::function<void(double)>& check) {
  opt_->zero_grad();
  Tensor loss;
  {
    TraceSpan span(tracer(), "main", "forward", "compute");
    // The loader already put the batch on the device (DataLoaderOptions::device); `to` is then
    // free.
    loss = compute_loss(options_.model, zero_->forward(batch.input.to(options_.device)),
                        batch.target.to(options_.device));
  }
  const double l = loss.item<double>();
  check(l);
  {
    TraceSpan span(tracer(), "main", "backward", "compute");
    loss.backward();
  }
  TraceSpan span(tracer(), "main", "optimizer", "compute");
  if (const double clip = clip_max_norm(options_.model); clip > 0) opt_->clip_grad_norm(clip);
  opt_->step();
  return l;
}

void ZeroStrategy::sync_full_model(bool optimizer) {
  zero_->summon_full_params();
  if (optimizer) full_opt_->load_state_dict(opt_->full_state_dict());
}

void ZeroStrategy::after_resume() {
  zero_->load_full_params();
  opt_->load_full_state_dict(full_opt_->state_dict());
}

std::vector<checkpoint::ShardPiece> ZeroStrategy::checkpoint_pieces() {
  return checkpoint::zero_checkpoint_pieces(*opt_);
}

bool ZeroStrategy::load_checkpoint_part(const checkpoint::CheckpointSource& source) {
  checkpoint::load_zero_checkpoint(source, *opt_);
  return true;
}

int ZeroStrategy::threads() const { return num_threads(); }

std::string ZeroStrategy::layout() const {
  const auto& replicate = zero_->replicate_group();
  return fmt::format("ZeRO stage {}, {} units{}{}", zero_->stage(), zero_->num_units(),
                     replicate == nullptr
                         ? ""
                         : fmt::format(", HSDP: sharded over {} ranks x {} "
                                       "replicas",
                                       zero_->shard_group().size(), replicate->size()),
                     why_.empty() ? "" : " (" + why_ + ")");
}

}  // namespace cohort::train
