// The launchers of the pointwise area's CUDA kernels: plain pointers, dtypes,
// StridedPlans and a stream, so that the tensor-level host code (the .cc
// files beside them, built by the C++ compiler, which check arguments and
// allocate) and the kernels (the .cu files, built by nvcc, which cannot parse
// cohort's fmt-based headers) meet here. Every launcher enqueues on `stream`
// and returns at once; a bad launch throws cohort::Error (check.h).
// Pointers are device pointers to the first element of each operand.
// Thread safety: stateless.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cohort/core/dtype.h"
#include "cohort/cuda/strided.h"

namespace cohort::cuda {

// ---- tensor_copy.cu ----
// dst <- src converted (plan: dst, src).
void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                 const StridedPlan<2>& plan, int64_t n, cudaStream_t stream);
// dst <- value in dst's dtype (plan: dst).
void launch_fill(void* dst, DType dtype, double value, const StridedPlan<1>& plan, int64_t n,
                 cudaStream_t stream);

// ---- elementwise.cu ----
// The values of native::BinaryOp, CompareOp and UnaryOp (elementwise.h, which
// nvcc cannot include; cohort/cuda/elementwise.cc checks that they agree).
enum class BinaryKind : int { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow };
enum class CompareKind : int { kEq, kNe, kLt, kLe, kGt, kGe };
enum class UnaryKind : int { kNeg, kExp, kLog, kSqrt, kAbs, kTanh, kSigmoid, kRelu, kGelu, kSign };
// Gradients of the pointwise functions (elementwise.h's *_backward).
enum class GradKind : int { kRelu, kGelu, kTanh, kSigmoid, kClamp };

// All operands in `dtype` (float32, float64, int32, int64, uint8, bfloat16;
// arithmetic on bfloat16 in float). Plans list the output first.
// out = a op b (plan: out, a, b).
void launch_binary(BinaryKind op, DType dtype, void* out, const void* a, const void* b,
                   const StridedPlan<3>& plan, int64_t n, cudaStream_t stream);
// out = a op s, or s op a when `reverse` (plan: out, a); s is converted to
// dtype's arithmetic type first, as the CPU converts its scalar tensor.
void launch_binary_scalar(BinaryKind op, DType dtype, void* out, const void* a, double s,
                          bool reverse, const StridedPlan<2>& plan, int64_t n, cudaStream_t stream);
// uint8 out = a op b (plan: out, a, b).
void launch_compare(CompareKind op, DType dtype, uint8_t* out, const void* a, const void* b,
                    const StridedPlan<3>& plan, int64_t n, cudaStream_t stream);
// uint8 out = a op s: in a's type for floats (s rounded to it), in double for
// integers, as the CPU's compare_scalar (plan: out, a).
void launch_compare_scalar(CompareKind op, DType dtype, uint8_t* out, const void* a, double s,
                           const StridedPlan<2>& plan, int64_t n, cudaStream_t stream);
// out = f(x) (plan: out, x).
void launch_unary(UnaryKind op, DType dtype, void* out, const void* x, const StridedPlan<2>& plan,
                  int64_t n, cudaStream_t stream);
// out = min(max(x, lo), hi) with the CPU's comparisons (plan: out, x).
void launch_clamp(DType dtype, void* out, const void* x, double lo, double hi,
                  const StridedPlan<2>& plan, int64_t n, cudaStream_t stream);
// out = mask ? a : b (plan: out, mask, a, b).
void launch_where(DType dtype, void* out, const uint8_t* mask, const void* a, const void* b,
                  const StridedPlan<4>& plan, int64_t n, cudaStream_t stream);
// out = alpha * a + beta * b, floating dtypes (plan: out, a, b).
void launch_axpby(DType dtype, void* out, const void* a, double alpha, const void* b, double beta,
                  const StridedPlan<3>& plan, int64_t n, cudaStream_t stream);
// out = the input gradient from grad and y (the op's output, or its input for
// gelu and clamp; [lo, hi] for clamp), floating dtypes (plan: out, grad, y).
void launch_grad(GradKind kind, DType dtype, void* out, const void* grad, const void* y, double lo,
                 double hi, const StridedPlan<3>& plan, int64_t n, cudaStream_t stream);

}  // namespace cohort::cuda
