#include "cohort/parallel/comm_hooks/allreduce_hook.h"

namespace cohort::parallel {

BucketReduction allreduce_average(distributed::ProcessGroup& pg, const Tensor& buffer) {
  Tensor b = buffer;
  return BucketReduction{
      pg.all_reduce(b, {.op = distributed::ReduceOp::kAvg}, distributed::async_op),
      {},
      buffer.nbytes()};
}

BucketFuture AllreduceHook::run(distributed::ProcessGroup& pg, GradBucket& bucket) {
  return {allreduce_average(pg, bucket.buffer)};
}

CommHookPtr allreduce_hook() { return std::make_shared<AllreduceHook>(); }

}  // namespace cohort::parallel
