#include "cohort/parallel/comm_hooks.h"

namespace cohort::parallel {

CommHook allreduce_hook() {
  return [](distributed::ProcessGroup& pg, GradBucket& bucket) {
    return BucketReduction{
        pg.all_reduce(bucket.buffer, {.op = distributed::ReduceOp::kAvg}, distributed::async_op),
        {}};
  };
}

CommHook bf16_compress_hook() {
  return [](distributed::ProcessGroup& pg, GradBucket& bucket) {
    Tensor compressed = bucket.buffer.to(DType::kBFloat16);
    distributed::Work work =
        pg.all_reduce(compressed, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
    double scale = 1.0 / pg.size();
    Tensor buffer = bucket.buffer;
    return BucketReduction{std::move(work), [buffer, compressed, scale]() mutable {
                             buffer.copy_(compressed);
                             buffer.mul_(scale);
                           }};
  };
}

}  // namespace cohort::parallel
