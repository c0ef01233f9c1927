// Communication hooks of ShardedDataParallel (ZeRO, FSDP), in the shape of
// PyTorch's FullyShardedDataParallel.register_comm_hook(state, hook) and
// torch.distributed.algorithms._comm_hooks.default_hooks: how one unit's
// local gradients become this rank's averaged segment of them.
//
//   zero.register_comm_hook(cohort::parallel::zero_fp16_compress_hook());
//
// FSDP's hook gets the unsharded gradient and an output for the shard; so
// does this one: `input` holds this rank's gradients of the unit in the
// layout's rank-major order (segment r is what rank r keeps, flat_layout.h),
// and when the last stage finished, `output` must hold segment `rank` averaged
// over the group. As FSDP, there is no PowerSGD form: a low-rank factor of a
// matrix is not a reduce_scatter of its elements.
//
// Built in: zero_reduce_scatter_hook() (the default: one reduce_scatter,
// average), zero_fp16_compress_hook() and zero_bf16_compress_hook() (the
// reduce_scatter in 16 bits: half the bytes; precision as compression_hooks.h
// says). A hook of one's own: derive from ShardedCommHook, or
// make_sharded_comm_hook(name, state, fn) with fn(State&, ProcessGroup&,
// ShardedGradBucket&) -> BucketFuture.
//
// The stages, ownership and threading are those of comm_hook.h: the hook
// starts its collectives and returns at once; ShardedDataParallel runs them
// through its ReductionScheduler, units in its fixed reduce order, the same
// on every rank; a hook keeps the temporaries its stages need in their
// closures; exceptions propagate out of backward() naming the unit.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "cohort/core/dtype.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"

namespace cohort::parallel {

// One unit as a sharded hook sees it.
struct ShardedGradBucket {
  size_t index = 0;       // position in the reduce order (the same on every rank)
  std::string unit = {};  // the unit's name ("" for the root unit)
  Tensor input = {};  // [N * segment]: this rank's gradients, rank-major; the hook may overwrite it
  Tensor output = {};  // [segment]: receives this rank's averaged segment
  bool is_last = false;
};

class ShardedCommHook {
 public:
  virtual ~ShardedCommHook() = default;
  virtual BucketFuture run(distributed::ProcessGroup& pg, ShardedGradBucket& bucket) = 0;
  virtual std::string name() const = 0;
};

using ShardedCommHookPtr = std::shared_ptr<ShardedCommHook>;

// The default: reduce_scatter (average) of `input` into `output`.
ShardedCommHookPtr zero_reduce_scatter_hook();
// `input` in float16 (divided by the group's size first) or bfloat16
// (divided after), reduce-scattered as a sum, widened into `output`.
ShardedCommHookPtr zero_fp16_compress_hook();
ShardedCommHookPtr zero_bf16_compress_hook();

template <typename State, typename Fn>
using FunctionShardedCommHook = FunctionHook<ShardedCommHook, ShardedGradBucket, State, Fn>;

template <typename State, typename Fn>
ShardedCommHookPtr make_sharded_comm_hook(std::string name, State state, Fn fn) {
  return std::make_shared<FunctionShardedCommHook<State, Fn>>(std::move(name), std::move(state),
                                                              std::move(fn));
}

// For ShardedDataParallel: `then` run after the last stage of `future`
// finished (the first stage's finish, or that of the stage `then` starts).
BucketFuture append_finish(BucketFuture future, std::function<void()> then);

}  // namespace cohort::parallel
