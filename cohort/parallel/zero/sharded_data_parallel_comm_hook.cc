// ShardedDataParallel's communication hook (sharded_data_parallel.h,
// comm_hooks/sharded_comm_hook.h): registration, and a unit's reduction
// through it.
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel {

void ShardedDataParallel::register_comm_hook(ShardedCommHookPtr hook) {
  COHORT_CHECK(hook != nullptr, "ShardedDataParallel::register_comm_hook (rank {}): hook is null",
               pg_->rank());
  COHORT_CHECK(comm_hook_ == nullptr,
               "ShardedDataParallel::register_comm_hook (rank {}): can only be called once (as "
               "FSDP's register_comm_hook): '{}' is registered already, refusing '{}'",
               pg_->rank(), comm_hook_ ? comm_hook_->name() : "", hook->name());
  COHORT_CHECK(!ran_forward_,
               "ShardedDataParallel::register_comm_hook (rank {}): register '{}' before the first "
               "forward (as FSDP's register_comm_hook), so that every reduction goes through it",
               pg_->rank(), hook->name());
  COHORT_CHECK(replicate_pg_ == nullptr,
               "ShardedDataParallel::register_comm_hook (rank {}): a communication hook is not "
               "supported under hybrid sharding (hybrid_shard_size {} of {} ranks), as FSDP's "
               "hybrid strategies: the replicas' all_reduce is not the hook's. Use plain ZeRO "
               "(hybrid_shard_size 0), or reduce_dtype bfloat16 for 16-bit reductions under HSDP",
               pg_->rank(), options_.hybrid_shard_size, pg_->size());
  COHORT_CHECK(options_.reduce_dtype == DType::kFloat32,
               "ShardedDataParallel::register_comm_hook (rank {}): reduce_dtype {} already says "
               "how the gradients go on the wire (it is zero_bf16_compress_hook()); leave "
               "reduce_dtype float32 to register '{}'",
               pg_->rank(), dtype_name(options_.reduce_dtype), hook->name());
  comm_hook_ = std::move(hook);
}

BucketReduction ShardedDataParallel::launch_hook(size_t n, Tensor send) {
  Unit& u = units_[reduce_order_[n]];
  ShardedGradBucket bucket{.index = n,
                           .unit = u.name,
                           .input = send,
                           .output = Tensor::empty({u.layout.shard_numel()}, send.dtype(), device_),
                           .is_last = n + 1 == reduce_order_.size()};
  BucketFuture future = comm_hook_->run(*shard_pg_, bucket);
  traffic_.reduce_scatter_bytes += future.reduction.bytes;
  if (future.then) {
    // The second stage's bytes count when it starts.
    future.then = [this, next = std::move(future.then)] {
      BucketReduction r = next();
      traffic_.reduce_scatter_bytes += r.bytes;
      return r;
    };
  }
  // The buffers stay alive until the last stage finished.
  future = append_finish(std::move(future), [this, n, send, out = bucket.output]() mutable {
    send = Tensor();
    finish_reduction(n, std::move(out));
  });
  return chain_stages(std::move(future),
                      [this, n](BucketReduction next) { scheduler_->then(n, std::move(next)); });
}

}  // namespace cohort::parallel
