// ShardedOptimizer: any cohort optimizer (SGD, Adam, AdamW, ... with their
// param groups) run over the shards of a ShardedDataParallel -- ZeRO's
// sharded optimizer state. The optimizer is built by the caller over
// model.shard_parameters() (or over model.shard_of(p) per group, e.g. to
// keep biases out of weight decay), so its state covers 1/N of every tensor.
// Element-wise optimizers (all of cohort's) then update each chunk exactly as
// they would update it inside the whole tensor.
//
//   ShardedOptimizer opt(zero, std::make_unique<optim::AdamW>(zero.shard_parameters(), o));
//   opt.zero_grad(); ... backward ...; opt.clip_grad_norm(1.0); opt.step();
//
// step() runs the optimizer on this rank's chunks and then lets the model
// bring the parameters up to date (stages 1, 2: one all_gather per unit;
// stage 3: nothing, the next forward gathers). clip_grad_norm() takes the
// norm of all gradients together: each rank's sum of squares (or max) over
// its chunks, all-reduced, so every rank clips by the same coefficient, as
// torch.nn.utils.clip_grad_norm_ over the unsharded gradients.
// Uneven inputs: a Joinable (join.h) listed after its ShardedDataParallel:
// a rank out of inputs still steps its shard with the others' average and
// takes part in the all_gather; if its own last step clipped, it clips
// again with the same arguments (its norm all_reduce matches the others',
// and its shard's share of the norm is the average it received). A rank with
// no batch at all has no such step to go by: where the others clip, the
// group reports the mismatch.
// Failure: InvalidArgument at construction when the optimizer holds a tensor
// that is not a shard of `model`; group failures propagate out of step().
// Ownership: owns the optimizer; `model` must outlive it.
// Thread safety: one training thread (collective calls).
#pragma once

#include <memory>
#include <optional>

#include "cohort/optim/optimizer.h"
#include "cohort/parallel/joinable.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel {

class ShardedOptimizer : public Joinable {
 public:
  ShardedOptimizer(ShardedDataParallel& model, std::unique_ptr<optim::Optimizer> optimizer);

  // Zeroes the gradients the model keeps (shards; stage 1's full gradients).
  void zero_grad();
  // Collective: the optimizer's step over the shards, then the parameters'
  // all_gather (stages 1, 2).
  void step();
  // Collective: the norm of all gradients (over every rank's chunks); scales
  // them by max_norm / (norm + 1e-6) when that is < 1. Returns the norm.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);

  // Collective: the optimizer's state_dict with each per-parameter state
  // tensor shaped like its shard gathered into the full parameter's shape
  // (scalars such as Adam's step kept): what an unsharded optimizer over the
  // model's trainable parameters, same order and groups, would hold.
  TensorDict full_state_dict();
  // The reverse: loads this rank's chunks of such a full state dict. No
  // communication.
  void load_full_state_dict(const TensorDict& full);

  optim::Optimizer& optimizer() { return *optimizer_; }
  ShardedDataParallel& model() { return model_; }
  // Bytes of the optimizer's per-parameter state on this rank (moments,
  // momentum buffers, step counts), measured from its state tensors.
  size_t state_bytes() const;

  // Joinable (join.h).
  void join_shadow_iteration() override;
  void join_finish(bool) override {}
  distributed::ProcessGroup& join_process_group() override { return model_.process_group(); }
  Device join_device() const override { return model_.join_device(); }
  void check_joinable(const JoinOptions& options, size_t position, size_t count) const override;

 private:
  ShardedDataParallel& model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  // clip_grad_norm's arguments in this step and in the last one (for the
  // Join's shadow).
  struct Clip {
    double max_norm = 0, norm_type = 2;
  };
  std::optional<Clip> clip_this_step_, clip_last_step_;
};

// Bytes of the per-parameter state of any optimizer ("state.*" entries of
// its state_dict), for comparing strategies.
size_t optimizer_state_bytes(const optim::Optimizer& optimizer);

}  // namespace cohort::parallel
