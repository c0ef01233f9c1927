#include "cohort/parallel/zero/sharded_optimizer.h"

#include <cmath>

#include "cohort/autograd/grad_mode.h"
#include "cohort/optim/clip_grad.h"

namespace cohort::parallel {

ShardedOptimizer::ShardedOptimizer(ShardedDataParallel& model,
                                   std::unique_ptr<optim::Optimizer> optimizer)
    : model_(model), optimizer_(std::move(optimizer)) {
  COHORT_CHECK(optimizer_ != nullptr, "ShardedOptimizer: optimizer is null");
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) {
    const auto& params = optimizer_->param_groups()[g].params;
    for (size_t i = 0; i < params.size(); ++i) {
      COHORT_CHECK(
          model_.is_shard(params[i]),
          "ShardedOptimizer: parameter {} of group {} of the {} optimizer ({}) is not a "
          "shard of the ShardedDataParallel model; build the optimizer over "
          "model.shard_parameters() or model.shard_of(param)",
          i, g, optimizer_->name(),
          fmt::format("{} {}", dtype_name((params[i]).dtype()), shape_str((params[i]).sizes())));
    }
  }
}

void ShardedOptimizer::zero_grad() { model_.zero_grad_shards(); }

void ShardedOptimizer::step() {
  clip_last_step_ = clip_this_step_;
  clip_this_step_.reset();
  optimizer_->step();
  model_.after_step();
}

void ShardedOptimizer::join_shadow_iteration() {
  // A no_sync forward (gradient accumulation) is followed by no step.
  if (!model_.last_forward_synchronised()) return;
  if (clip_last_step_) clip_grad_norm(clip_last_step_->max_norm, clip_last_step_->norm_type);
  step();
}

void ShardedOptimizer::check_joinable(const JoinOptions&, size_t position, size_t) const {
  COHORT_CHECK(position > 0,
               "ShardedOptimizer: list it after its ShardedDataParallel in the Join "
               "(Join({{&zero, &optimizer}})): the first joinable tells the Join, before its "
               "collectives, that its rank still trains, and the model's come before step()'s");
}

double ShardedOptimizer::clip_grad_norm(double max_norm, double norm_type) {
  clip_this_step_ = Clip{max_norm, norm_type};
  std::vector<Tensor> shards = model_.shard_parameters();
  double total;
  if (std::isinf(norm_type)) {
    total = model_.all_reduce_max(optim::grad_norm(shards, norm_type));
  } else {
    // Sum of |g|^p over this rank's chunks (disjoint, padding excluded).
    const double local = std::pow(optim::grad_norm(shards, norm_type), norm_type);
    total = std::pow(model_.all_reduce_sum(local), 1.0 / norm_type);
  }
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (Tensor& p : shards) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return total;
}

namespace {

// The optimizer's parameters in state_dict numbering (groups in order).
std::vector<Tensor> numbered_params(const optim::Optimizer& opt) {
  std::vector<Tensor> out;
  for (const optim::ParamGroup& g : opt.param_groups())
    out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

}  // namespace

TensorDict ShardedOptimizer::full_state_dict() {
  // Every rank holds the same keys in the same order (every shard has a
  // gradient, so the optimizers create the same state), so the gathers line up.
  const std::vector<Tensor> params = numbered_params(*optimizer_);
  TensorDict full;
  for (const auto& [key, t] : optimizer_->state_dict()) {
    const int64_t i = optim::state_key_param_index(key);
    const bool chunked = i >= 0 && t.dim() == 1 && t.sizes() == params[i].sizes();
    full.insert(key, chunked ? model_.gather_chunk(params[i], t) : t.clone());
  }
  return full;
}

void ShardedOptimizer::load_full_state_dict(const TensorDict& full) {
  const std::vector<Tensor> params = numbered_params(*optimizer_);
  TensorDict mine;
  for (const auto& [key, t] : full) {
    const int64_t i = optim::state_key_param_index(key);
    const bool chunked = i >= 0 && i < static_cast<int64_t>(params.size()) && t.dim() > 0 &&
                         t.numel() == model_.full_numel_of(params[i]);
    mine.insert(key, chunked ? model_.chunk_of(params[i], t) : t.clone());
  }
  optimizer_->load_state_dict(mine);
}

size_t optimizer_state_bytes(const optim::Optimizer& optimizer) {
  size_t bytes = 0;
  for (const auto& [key, t] : optimizer.state_dict())
    if (optim::state_key_param_index(key) >= 0) bytes += t.nbytes();
  return bytes;
}

size_t ShardedOptimizer::state_bytes() const { return optimizer_state_bytes(*optimizer_); }

}  // namespace cohort::parallel
