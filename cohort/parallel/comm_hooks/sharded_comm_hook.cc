#include "cohort/parallel/comm_hooks/sharded_comm_hook.h"

#include "cohort/base/error.h"

namespace cohort::parallel {
namespace {

class ReduceScatterHook final : public ShardedCommHook {
 public:
  BucketFuture run(distributed::ProcessGroup& pg, ShardedGradBucket& bucket) override {
    Tensor out = bucket.output;
    distributed::Work work = pg.reduce_scatter_tensor(
        out, bucket.input, {.op = distributed::ReduceOp::kAvg}, distributed::async_op);
    return {BucketReduction{std::move(work), {}, bucket.input.nbytes()}};
  }
  std::string name() const override { return "reduce_scatter"; }
};

class ShardedCompressionHook final : public ShardedCommHook {
 public:
  explicit ShardedCompressionHook(DType dtype) : dtype_(dtype) {}

  BucketFuture run(distributed::ProcessGroup& pg, ShardedGradBucket& bucket) override {
    const double scale = 1.0 / pg.size();
    // float16's range (65504) needs the division before the sum; bfloat16
    // has float32's range and keeps the digits the division would round.
    const bool divide_first = dtype_ == DType::kFloat16;
    if (divide_first) bucket.input.mul_(scale);
    Tensor send = bucket.input.to(dtype_);
    Tensor recv = Tensor::empty({bucket.output.numel()}, dtype_, bucket.output.device());
    distributed::Work work = pg.reduce_scatter_tensor(
        recv, send, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
    const size_t bytes = send.nbytes();
    return {BucketReduction{std::move(work),
                            [out = bucket.output, send, recv, scale, divide_first]() mutable {
                              send = Tensor();
                              out.copy_(recv);
                              if (!divide_first) out.mul_(scale);
                            },
                            bytes}};
  }
  std::string name() const override {
    return dtype_ == DType::kFloat16 ? "fp16_compress" : "bf16_compress";
  }

 private:
  DType dtype_;
};

}  // namespace

ShardedCommHookPtr zero_reduce_scatter_hook() { return std::make_shared<ReduceScatterHook>(); }

ShardedCommHookPtr zero_fp16_compress_hook() {
  return std::make_shared<ShardedCompressionHook>(DType::kFloat16);
}

ShardedCommHookPtr zero_bf16_compress_hook() {
  return std::make_shared<ShardedCompressionHook>(DType::kBFloat16);
}

BucketFuture append_finish(BucketFuture future, std::function<void()> then) {
  if (!future.then) {
    future.reduction.finish = [finish = std::move(future.reduction.finish),
                               then = std::move(then)] {
      if (finish) finish();
      then();
    };
    return future;
  }
  future.then = [next = std::move(future.then), then = std::move(then)]() mutable {
    BucketReduction r = next();
    r.finish = [finish = std::move(r.finish), then] {
      if (finish) finish();
      then();
    };
    return r;
  };
  return future;
}

}  // namespace cohort::parallel
