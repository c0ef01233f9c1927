// ZeroRedundancyOptimizer for LibTorch: ZeRO stages 1 and 2 for any
// torch::optim::Optimizer (PyTorch's Python ZeroRedundancyOptimizer, which
// LibTorch lacks). Each rank owns a shard of the parameters and keeps the
// optimizer state (momentum, Adam's moments) of its shard only, so optimizer
// memory falls to about 1/size() per rank.
//
//   Stage 1, after DDP (gradients already averaged everywhere):
//     DistributedDataParallel ddp(model, pg);
//     ZeroRedundancyOptimizer opt(model->parameters(), pg, [](std::vector<at::Tensor> p) {
//       return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
//     });
//     ... ddp.forward / backward ...; opt.step();
//   Stage 2, without DDP (gradients from a plain backward):
//     ZeroRedundancyOptimizer opt(model->parameters(), pg, make_adam, {.stage = 2});
//     ... model->forward / backward ...; opt.step();
//
// step(): stage 2 first averages each parameter's gradient onto its owner
// only (reduce with ReduceOp::kAvg, one per parameter, all issued before the
// first wait) and releases the gradients of parameters this rank does not own
// (.grad undefined: their memory is freed); stage 1 takes the gradients as
// they are (DDP averaged them). Stage 2 with overlap_with_backward issues
// those reductions while backward runs instead: a post hook on each
// parameter's gradient accumulator (as DistributedDataParallel's) launches
// its reduction to the owner as soon as its gradient is in .grad, in reverse
// registration order on every rank (a parameter whose gradient is not there
// yet holds back the later ones), and drops a gradient this rank does not own
// right away (the reduction keeps it until it has been sent); step() launches
// what backward did not reach (with zeros, as unused parameters) and waits.
// One backward per step() then: a second backward before step() throws
// InvalidArgument naming the parameter (gradient accumulation needs it off). Then the owner's
// optimizer updates its shard and every shard is broadcast from its owner, so all ranks end the
// step with the same parameters. Same result as the full optimizer on every rank, to rounding of
// the average.
//
// Parameters: contiguous CPU or CUDA tensors; CUDA ones are reduced and
// broadcast through the path of cuda_tensors.h (one broadcast per shard,
// dtype and device).
//
// Sharding: parameters sorted by size (largest first, registration order
// among equals) go each to the rank with the fewest elements so far (the
// lowest rank among equals); every rank computes the same assignment.
// Uneven inputs: a Joinable (cohort/parallel/join.h), as PyTorch's: a rank
// out of inputs runs the others' step() (after DDP's shadow of the
// gradients, or with zero gradients under stage 2 without DDP), so that its
// shard is still updated and broadcast. Not with overlap_with_backward (its
// reductions start in backward, before step() could tell the Join).
//
// Collective: every rank calls the constructor and step() in the same order;
// failures are the group's (PeerLost, TimeoutError), from step() with the
// parameter named. Not thread safe; with overlap the hooks run on the thread
// that runs backward, and are removed by the destructor.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <vector>

#include "cohort/libtorch/process_group.h"
#include "cohort/parallel/joinable.h"

namespace cohort::libtorch {

struct ZeroRedundancyOptimizerOptions {
  int stage = 1;  // 1: shard optimizer state; 2: also gradients (reduced to owners)
  // Stage 2: reduce each gradient to its owner from backward's accumulator
  // hooks as backward runs (overlap), not in step().
  bool overlap_with_backward = false;
};

class ZeroRedundancyOptimizer : public parallel::Joinable {
 public:
  using Factory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> params)>;

  // params: the model's parameters, the same list on every rank. make_optimizer
  // builds the optimizer of this rank's shard (may get an empty list).
  ZeroRedundancyOptimizer(std::vector<at::Tensor> params, ProcessGroup pg, Factory make_optimizer,
                          ZeroRedundancyOptimizerOptions options = {});
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(ZeroRedundancyOptimizer&&) noexcept;
  ZeroRedundancyOptimizer& operator=(ZeroRedundancyOptimizer&&) noexcept;

  void step();
  // Zeroes (set_to_none: releases) every parameter's gradient, owned or not.
  void zero_grad(bool set_to_none = false);

  // The rank that owns parameter i (index into the constructor's list).
  int owner(size_t i) const { return owner_[i]; }
  // This rank's optimizer, over its shard.
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  const std::vector<at::Tensor>& parameters() const { return params_; }
  // Overlap: the reductions launched by backward's hooks since the last
  // step() (0 without overlap).
  size_t reductions_launched_in_backward() const;

  // Joinable (cohort/parallel/join.h).
  void join_shadow_iteration() override;
  void join_finish(bool) override {}
  void check_joinable(const parallel::JoinOptions& options, size_t position,
                      size_t count) const override;
  distributed::ProcessGroup& join_process_group() override { return *pg_.group(); }
  Device join_device() const override;

  struct Overlap;

 private:
  void reduce_gradients();
  void step_shards();
  void refuse_overlap_under_join() const;

  std::vector<at::Tensor> params_;
  ProcessGroup pg_;
  ZeroRedundancyOptimizerOptions options_;
  std::vector<int> owner_;
  std::vector<std::vector<size_t>> shards_;  // per rank: parameter indices, in order
  std::unique_ptr<torch::optim::Optimizer> local_;
  std::unique_ptr<Overlap> overlap_;
};

}  // namespace cohort::libtorch
