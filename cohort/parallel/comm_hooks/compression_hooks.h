// Gradient compression by a narrower dtype (PyTorch's
// default_hooks.fp16_compress_hook and bf16_compress_hook): the bucket is
// converted to float16 or bfloat16 (half the bytes on the wire),
// all-reduced, and converted back into the float32 bucket. The collectives
// add 16-bit values in float32 and round after each step.
//
// fp16 divides by the world size before the conversion (as PyTorch's), so
// that the sum cannot overflow float16's 65504; precision about 3
// significant digits, and gradients below about 6e-8 / world size flush to
// zero. bf16 keeps float32's range, so it sums first and divides after;
// precision about 2-3 significant digits. Stateless; see comm_hook.h for
// ownership and threading.
#pragma once

#include "cohort/core/dtype.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"

namespace cohort::parallel {

class CompressionHook final : public CommHook {
 public:
  // dtype: kFloat16 or kBFloat16 (else InvalidArgument).
  explicit CompressionHook(DType dtype);
  BucketFuture run(distributed::ProcessGroup& pg, GradBucket& bucket) override;
  std::string name() const override;

 private:
  DType dtype_;
};

CommHookPtr fp16_compress_hook();
CommHookPtr bf16_compress_hook();

// The hook for gradients reduced in `dtype`: float32 -> allreduce_hook(),
// bfloat16 -> bf16_compress_hook(), float16 -> fp16_compress_hook(); other
// dtypes throw InvalidArgument.
CommHookPtr grad_reduce_hook(DType dtype);

}  // namespace cohort::parallel
