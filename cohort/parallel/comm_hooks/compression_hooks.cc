#include "cohort/parallel/comm_hooks/compression_hooks.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"

namespace cohort::parallel {

CompressionHook::CompressionHook(DType dtype) : dtype_(dtype) {
  COHORT_CHECK(dtype == DType::kFloat16 || dtype == DType::kBFloat16,
               "CompressionHook: compresses to float16 or bfloat16, not {}", dtype_name(dtype));
}

std::string CompressionHook::name() const {
  return dtype_ == DType::kFloat16 ? "fp16_compress" : "bf16_compress";
}

BucketFuture CompressionHook::run(distributed::ProcessGroup& pg, GradBucket& bucket) {
  const double scale = 1.0 / pg.size();
  Tensor compressed;
  if (dtype_ == DType::kFloat16) {
    // Scaled in place in float32 (the bucket is overwritten by the result).
    Tensor buffer = bucket.buffer;
    buffer.mul_(scale);
    compressed = buffer.to(DType::kFloat16);
  } else {
    compressed = bucket.buffer.to(DType::kBFloat16);
  }
  distributed::Work work =
      pg.all_reduce(compressed, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
  const size_t bytes = compressed.nbytes();
  const bool divide_after = dtype_ == DType::kBFloat16;
  return {BucketReduction{std::move(work),
                          [buffer = bucket.buffer, compressed, scale, divide_after]() mutable {
                            buffer.copy_(compressed);
                            if (divide_after) buffer.mul_(scale);
                          },
                          bytes}};
}

CommHookPtr fp16_compress_hook() { return std::make_shared<CompressionHook>(DType::kFloat16); }
CommHookPtr bf16_compress_hook() { return std::make_shared<CompressionHook>(DType::kBFloat16); }

CommHookPtr grad_reduce_hook(DType dtype) {
  if (dtype == DType::kFloat32) return allreduce_hook();
  if (dtype == DType::kBFloat16) return bf16_compress_hook();
  if (dtype == DType::kFloat16) return fp16_compress_hook();
  throw InvalidArgument(
      fmt::format("grad_reduce_hook: gradients are reduced in float32, bfloat16 or float16, not {}",
                  dtype_name(dtype)));
}

}  // namespace cohort::parallel
