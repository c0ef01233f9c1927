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
#include <vector>

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

// native/bf16_rounding.h's stochastic rounding of n float32 values: y[i]
// from (seed, offset + i), bit for bit the CPU's.
void launch_to_bf16_stochastic(const float* x, uint16_t* y, int64_t n, uint64_t seed,
                               uint64_t offset, cudaStream_t stream);

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

// ---- reduce.cu ----
// Sums accumulate in double for the float dtypes (float32, float64, bfloat16)
// and in int64 for the integers, into `out` of out_dtype (the input's float
// dtype, int64 for integers), times `scale` (1, or 1/count for a mean).
// Each sum is split into chunks whose partial sums land in `scratch` (8-byte
// accumulators, *_sum_scratch of them) and are added in a fixed order, so a
// result does not depend on timing.
//
// Rows: x is [rows, inner] contiguous, out[r] = scale * sum_i x[r, i].
int64_t row_sum_chunks(int64_t rows, int64_t inner);
inline int64_t row_sum_scratch(int64_t rows, int64_t inner) {
  return rows * row_sum_chunks(rows, inner);
}
void launch_sum_rows(DType dtype, const void* x, int64_t rows, int64_t inner, DType out_dtype,
                     void* out, double scale, void* scratch, cudaStream_t stream);
// Columns: x is [inner, cols] contiguous, out[c] = scale * sum_i x[i, c].
int64_t column_sum_splits(int64_t inner, int64_t cols);
inline int64_t column_sum_scratch(int64_t inner, int64_t cols) {
  return cols * column_sum_splits(inner, cols);
}
void launch_sum_columns(DType dtype, const void* x, int64_t inner, int64_t cols, DType out_dtype,
                        void* out, double scale, void* scratch, cudaStream_t stream);
// Max (or min) of each row of x [rows, n] contiguous (n > 0): the value in
// x's dtype and the int64 index of its first occurrence; a NaN wins, the
// first one, as on the CPU.
void launch_extreme_rows(bool is_max, DType dtype, const void* x, int64_t rows, int64_t n,
                         void* values, int64_t* indices, cudaStream_t stream);

// ---- softmax.cu ----
// Along the rows of contiguous [rows, n] tensors, float32, float64 or
// bfloat16 (arithmetic in float): the max subtracted first, the exponentials
// summed in double, as the CPU's rows.
void launch_softmax(bool log, DType dtype, const void* x, void* y, int64_t rows, int64_t n,
                    cudaStream_t stream);
// log:  dx = g - exp(y) * sum(g)      (y = log_softmax(x))
// else: dx = y * (g - sum(g * y))     (y = softmax(x))
void launch_softmax_backward(bool log, DType dtype, const void* g, const void* y, void* dx,
                             int64_t rows, int64_t n, cudaStream_t stream);
// Reduction codes of cohort::Reduction (loss.h): 0 none, 1 mean, 2 sum.
// x [n, c] log-probabilities, target [n] int64. per [n] (the kNone result,
// 0 at ignored rows) when non-null; out[0] the sum or the mean over the rows
// not ignored (NaN when all are) when reduction is 1 or 2. A target outside
// [0, c) that is not ignore_index stops the kernel with a device-side error
// (as PyTorch's device assert), reported by the next synchronising call.
void launch_nll_loss(DType dtype, const void* x, const int64_t* target, int64_t n, int64_t c,
                     int64_t ignore_index, int reduction, void* per, void* out,
                     cudaStream_t stream);
// dx [n, c], zeroed by the caller: dx[i, target[i]] = -g_i with g_i = grad[i]
// (none), grad[0] (sum) or grad[0] / count (mean).
void launch_nll_loss_backward(DType dtype, const void* grad, const int64_t* target, int64_t n,
                              int64_t c, int64_t ignore_index, int reduction, void* dx,
                              cudaStream_t stream);

// ---- index.cu ----
// Out-of-range indices stop the kernel with a device-side error (as PyTorch's
// device asserts), reported by the next synchronising call.
// out [outer, k, inner] = x [outer, n, inner] at rows index[0..k) of its
// middle dim; any dtype (elements of elem_size bytes are moved as bits).
void launch_index_select(size_t elem_size, const void* x, void* out, const int64_t* index,
                         int64_t outer, int64_t n, int64_t k, int64_t inner, cudaStream_t stream);
// out [outer, n, inner] (zeroed by the caller) += src [outer, k, inner] at
// rows index[0..k); float32, float64, int32, int64. Repeated indices add by
// atomics, so float sums over repeats are in no fixed order.
void launch_index_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, cudaStream_t stream);
// Inverted dropout of n contiguous elements (float32 or float64): mask =
// keep ? 1/(1-p) : 0 and out = x * mask, where keep is the CPU's bernoulli
// draw for element i from cohort's Philox stream (seed, Philox blocks from
// `block`), so both devices drop the same elements.
void launch_dropout(DType dtype, const void* x, void* out, void* mask, int64_t n, double p,
                    uint64_t seed, uint64_t block, cudaStream_t stream);
// out = mask != 0 ? value : x (plan: out, x, mask); mask uint8, int32 or int64.
void launch_masked_fill(DType dtype, void* out, const void* x, DType mask_dtype, const void* mask,
                        double value, const StridedPlan<3>& plan, int64_t n, cudaStream_t stream);
// torch.gather over index's shape (plan: out, x with a zero stride at dim,
// index): out = x[.., index, ..] with x_dim_stride and n = x.size(dim); any
// dtype (as bits).
void launch_gather(size_t elem_size, void* out, const void* x, const int64_t* index,
                   int64_t x_dim_stride, int64_t n, const StridedPlan<3>& plan, int64_t count,
                   cudaStream_t stream);
// scatter_add over index's shape (plan: src, out with a zero stride at dim,
// index): out[.., index, ..] += src by atomics; float32, float64, int32, int64.
void launch_scatter_add(DType dtype, void* out, const void* src, const int64_t* index,
                        int64_t out_dim_stride, int64_t n, const StridedPlan<3>& plan,
                        int64_t count, cudaStream_t stream);
// x, out contiguous [batch, r, c]: out[.., i, j] = x[.., i, j] where j - i <=
// diagonal (lower) or >= diagonal (upper), else zero; any dtype.
void launch_triangle(size_t elem_size, const void* x, void* out, int64_t batch, int64_t r,
                     int64_t c, int64_t diagonal, bool lower, cudaStream_t stream);

// ---- fused_optim.cu ----
// One tensor of a multi-tensor update: n contiguous elements; the pointers a,
// b, c are the optimizer's state (SGD: the momentum buffer; Adam: exp_avg,
// exp_avg_sq, max_exp_avg_sq), null where unused; s0, s1 per-tensor values
// (SGD: s0 = 1 on the first step; Adam: s0 = sqrt(bc2), s1 = -lr / bc1).
struct FusedTensor {
  void* p = nullptr;
  const void* g = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  int64_t n = 0;
  double s0 = 0, s1 = 0;
};
// native::SgdStep as the loop's coefficients (cast to the dtype in the kernel).
struct SgdConsts {
  double lr, momentum, damp1, weight_decay, sign;
  bool has_weight_decay, has_momentum, nesterov;
};
// native::AdamStep as the loop's coefficients; decay: 0 none, 1 L2, 2 AdamW.
struct AdamConsts {
  double sign, weight_decay, decay_factor, beta1, beta2, one_beta1, one_beta2, eps;
  int decay;
  bool amsgrad;
};
// All tensors of one dtype (float32 or float64); one launch per 48 tensors.
void launch_sgd_step(DType dtype, const std::vector<FusedTensor>& tensors, const SgdConsts& c,
                     cudaStream_t stream);
void launch_adam_step(DType dtype, const std::vector<FusedTensor>& tensors, const AdamConsts& c,
                      cudaStream_t stream);
// Doubles of scratch launch_total_norm needs for these tensors (p only).
int64_t total_norm_scratch(const std::vector<FusedTensor>& tensors);
// out[0] = the norm of order p (inf: max |x|) of the tensors' elements (p);
// partial sums of fixed chunks are added in order, so the result is the same
// on every run.
void launch_total_norm(DType dtype, const std::vector<FusedTensor>& tensors, double p,
                       double* scratch, double* out, cudaStream_t stream);
// Each tensor (p) *= max_norm / (norm[0] + 1e-6) unless that is >= 1.
void launch_scale_by_norm(DType dtype, const std::vector<FusedTensor>& tensors, const double* norm,
                          double max_norm, cudaStream_t stream);

}  // namespace cohort::cuda
