#include "cohort/parallel/comm_hooks.h"

namespace cohort::parallel {

CommHook allreduce_hook() {
  return [](distributed::ProcessGroup& pg, GradBucket& bucket) {
    return BucketReduction{
        pg.all_reduce(bucket.buffer, {.op = distributed::ReduceOp::kAvg}, distributed::async_op),
        {},
        bucket.buffer.nbytes()};
  };
}

CommHook bf16_compress_hook() {
  return [](distributed::ProcessGroup& pg, GradBucket& bucket) {
    Tensor compressed = bucket.buffer.to(DType::kBFloat16);
    distributed::Work work =
        pg.all_reduce(compressed, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
    double scale = 1.0 / pg.size();
    Tensor buffer = bucket.buffer;
    const size_t bytes = compressed.nbytes();
    return BucketReduction{std::move(work),
                           [buffer, compressed, scale]() mutable {
                             buffer.copy_(compressed);
                             buffer.mul_(scale);
                           },
                           bytes};
  };
}

CommHook grad_reduce_hook(DType dtype) {
  if (dtype == DType::kFloat32) return allreduce_hook();
  if (dtype == DType::kBFloat16) return bf16_compress_hook();
  throw InvalidArgument(fmt::format(
      "grad_reduce_hook: gradients are reduced in float32 or bfloat16, not {}", dtype_name(dtype)));
}

}  // namespace cohort::parallel
