// Communication hooks of DistributedDataParallel, in the shape of PyTorch's
// DistributedDataParallel.register_comm_hook(state, hook) and
// torch.distributed.algorithms.ddp_comm_hooks: how one bucket of local
// gradients becomes the average over the ranks. A hook is an object that
// carries its own state (PowerSGD's error feedback, its low-rank factors,
// its iteration count), registered once per DDP:
//
//   ddp.register_comm_hook(cohort::parallel::powersgd_hook({.matrix_approximation_rank = 2}));
//
// The built-in hooks, one file each beside this one: allreduce_hook.h (the
// default), compression_hooks.h (fp16, bf16), powersgd_hook.h (PowerSGD and
// its batched form). A hook of one's own: derive from CommHook, or
// make_comm_hook(name, state, fn) with a function of (State&, ProcessGroup&,
// GradBucket&).
//
// A hook starts the bucket's reduction and returns at once with a
// BucketFuture: a started reduction (BucketReduction, reduction_scheduler.h:
// a Work to wait for and a `finish` step) and, optionally, a second stage
// started once the first finished (PowerSGD's all_reduce of Q needs the
// reduced P). The reducers run both stages through their one
// ReductionScheduler (the second is ReductionScheduler::then), so a hook
// never waits itself and every rank issues the same collectives in the same
// order. When the last stage finished, the bucket's buffer must hold the
// averaged gradients, in place (the parameters' .grad are views into it).
//
// Ownership: the DDP shares the hook (shared_ptr); a hook keeps whatever
// temporaries its stages need alive in their closures. Thread safety: a hook
// is called on the thread that runs backward, one bucket at a time, in bucket
// order, the same on every rank; its stages run on that thread too. Failure:
// a hook that throws, or a failed Work, propagates out of backward() with the
// bucket named (reducer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/distributed/process_group.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::parallel {

// One parameter of a bucket.
struct GradBucketParam {
  std::string name;
  Tensor parameter;    // the parameter itself
  Tensor gradient;     // its gradient: the view into the bucket's buffer, shaped like the parameter
  int64_t offset = 0;  // the gradient's first element in the buffer
};

// One bucket as a hook sees it (PyTorch's dist.GradBucket).
struct GradBucket {
  size_t index = 0;                     // position in the reduction order (the same on every rank)
  Tensor buffer;                        // flat, contiguous [numel]: this rank's gradients
  std::vector<GradBucketParam> params;  // in buffer order
  bool is_last = false;                 // the last bucket of the iteration

  std::vector<Tensor> gradients() const;
  std::vector<Tensor> parameters() const;
};

// The future of a bucket's reduced buffer: `reduction`, then (if set) the
// reduction `then` starts once the first one finished. bytes of both count
// towards Reducer::reduced_bytes: what this rank handed to the collectives
// for the bucket (times the algorithm's factor, 2 (n - 1) / n for a ring).
struct BucketFuture {
  BucketReduction reduction;
  std::function<BucketReduction()> then = {};
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  // Starts the reduction of `bucket` over `pg` (see above).
  virtual BucketFuture run(distributed::ProcessGroup& pg, GradBucket& bucket) = 0;
  // For logs and messages ("allreduce", "powersgd:2", ...).
  virtual std::string name() const = 0;
};

using CommHookPtr = std::shared_ptr<CommHook>;

// PyTorch's register_comm_hook(state, hook) as one object: fn(state, pg,
// bucket) -> BucketFuture, with `state` owned by the hook. Base: CommHook
// with GradBucket, or ShardedCommHook with ShardedGradBucket
// (sharded_comm_hook.h).
template <typename Base, typename Bucket, typename State, typename Fn>
class FunctionHook final : public Base {
 public:
  FunctionHook(std::string name, State state, Fn fn)
      : name_(std::move(name)), state_(std::move(state)), fn_(std::move(fn)) {}
  BucketFuture run(distributed::ProcessGroup& pg, Bucket& bucket) override {
    return fn_(state_, pg, bucket);
  }
  std::string name() const override { return name_; }
  State& state() { return state_; }

 private:
  std::string name_;
  State state_;
  Fn fn_;
};

template <typename State, typename Fn>
using FunctionCommHook = FunctionHook<CommHook, GradBucket, State, Fn>;

template <typename State, typename Fn>
CommHookPtr make_comm_hook(std::string name, State state, Fn fn) {
  return std::make_shared<FunctionCommHook<State, Fn>>(std::move(name), std::move(state),
                                                       std::move(fn));
}

// For the reducers: the first stage of `future` as the scheduler's
// BucketReduction; its finish hands the second stage, once started, to
// `post` (ReductionScheduler::then for the bucket).
BucketReduction chain_stages(BucketFuture future, std::function<void(BucketReduction)> post);

// The error of a second registration (PyTorch: "register_comm_hook or
// register_builtin_comm_hook can only be called once"), for the reducers.
[[noreturn]] void throw_hook_registered_twice(const std::string& what, const CommHook& first,
                                              const CommHook& second);

}  // namespace cohort::parallel
