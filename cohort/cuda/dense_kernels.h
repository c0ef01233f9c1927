// Launchers of the dense area's hand-written CUDA kernels (the *.cu files),
// on raw device pointers, for the tensor-level functions in the *.cc files:
// the .cc files check shapes and dtypes and allocate, the kernels only
// compute. Every launcher enqueues on `stream` and checks the launch; sizes
// of zero launch nothing. dtype names the element type of the pointers typed
// void*: float32, float64 or bfloat16 where a launcher says so (others are
// rejected by the callers before).
// Thread safety: reentrant.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cohort/core/dtype.h"

namespace cohort::cuda {

// gelu.cu ------------------------------------------------------------------
// y[r, c] += bias[c] over a contiguous [rows, cols] y (float32 / float64).
void launch_add_bias_rows(DType dtype, void* y, const void* bias, int64_t rows, int64_t cols,
                          cudaStream_t stream);
// y = gelu_tanh(x), n elements (float32 / float64 / bfloat16, computed in
// float32 for bfloat16; y may be x).
void launch_gelu_tanh(DType dtype, const void* x, void* y, int64_t n, cudaStream_t stream);
// dx = grad * gelu_tanh'(x) (same dtypes as launch_gelu_tanh).
void launch_gelu_tanh_backward(DType dtype, const void* grad, const void* x, void* dx, int64_t n,
                               cudaStream_t stream);
// out[c] = sum over r of x[r, c], a contiguous [rows, cols] x; out has x's
// dtype (float32 / float64), sums in that dtype in a fixed order (the same
// bits every run).
void launch_column_sums(DType dtype, const void* x, void* out, int64_t rows, int64_t cols,
                        cudaStream_t stream);

// conv2d_kernels.cu --------------------------------------------------------
// out = dy where y > 0, else 0 (float32, n elements): the backward of a ReLU
// fused into conv2d, from its output.
void launch_relu_mask(const float* dy, const float* y, float* out, int64_t n, cudaStream_t stream);

// pool2d_kernels.cu --------------------------------------------------------
// Max pooling over `planes` contiguous NCHW planes (float32), the geometry
// and tie rules of core/kernels/pool2d.h; argmax int32 within a plane.
struct PoolShape {
  int64_t planes, in_h, in_w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};
void launch_max_pool2d_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                               cudaStream_t stream);
// dx = dy gathered at argmax: each input element sums, in the CPU's order,
// the gradients of the windows that chose it (no atomics: the same bits
// every run).
void launch_max_pool2d_backward(const PoolShape& s, const float* dy, const int32_t* argmax,
                                float* dx, cudaStream_t stream);

// layer_norm_kernels.cu ----------------------------------------------------
// Row-wise LayerNorm over `rows` contiguous rows of n elements of dtype
// (float32 or bfloat16), weight and bias float32 [n] or null, statistics
// float32 [rows]. With delta, each row is sum = x + delta first (written to
// `sum` in dtype, and normalised as written). out16 (float32 x only, may be
// null): out rounded to bfloat16 as well.
void launch_layer_norm_forward(DType dtype, const void* x, const void* delta, void* sum,
                               const float* weight, const float* bias, void* out, void* out16,
                               float* mean, float* rstd, int64_t rows, int64_t n, float eps,
                               cudaStream_t stream);
// dx (dtype, may be null) from grad (dtype), and, when dweight_part is not
// null, partial column sums of grad * xhat and of grad into [chunks, n]
// float32 buffers (chunks = layer_norm_partial_chunks(rows)), to be added
// by launch_column_sums.
int64_t layer_norm_partial_chunks(int64_t rows);
void launch_layer_norm_backward(DType dtype, const void* grad, const void* x, const float* weight,
                                const float* mean, const float* rstd, void* dx, float* dweight_part,
                                float* dbias_part, int64_t rows, int64_t n, cudaStream_t stream);

// cross_entropy_kernels.cu -------------------------------------------------
// Cross-entropy over [n, c] contiguous logits (float32 or bfloat16) and
// targets (int64, int32 or uint8 class indices) in one pass per row: an
// online maximum and sum of exponentials, lse[i] (float32) and the row's
// loss per_row[i] = lse[i] - logits[i, t_i]; rows whose target is
// ignore_index get 0 for both, rows whose target is out of [0, c) NaN (the
// device does not stop to report them).
void launch_cross_entropy_forward(DType logits_dtype, const void* logits, DType target_dtype,
                                  const void* target, float* lse, float* per_row, int64_t n,
                                  int64_t c, int64_t ignore_index, cudaStream_t stream);
// loss[0] = the sum (or, mean, the mean; NaN when every row is ignored) of
// per_row over the rows not ignored; sums in float64, one block.
void launch_cross_entropy_reduce(const float* per_row, DType target_dtype, const void* target,
                                 float* loss, int64_t n, int64_t ignore_index, bool mean,
                                 cudaStream_t stream);
// dx[i, :] = (softmax(logits[i]) - onehot(t_i)) * g_i, with g_i = grad[i]
// (per_row), grad[0], or grad[0] / (rows not ignored) (mean, counted into
// count_scratch, one float); 0 for ignored rows. dx in the logits' dtype.
void launch_cross_entropy_backward(DType logits_dtype, const void* logits, DType target_dtype,
                                   const void* target, const float* lse, const float* grad,
                                   bool grad_per_row, bool mean, float* count_scratch, void* dx,
                                   int64_t n, int64_t c, int64_t ignore_index, cudaStream_t stream);

// attention_kernels.cu -----------------------------------------------------
// Heads of one attention operand: head bh = b * heads + h starts at data +
// (bh / heads) * batch_stride + (bh % heads) * head_stride elements, its row
// t at + t * row_stride; a row's head_dim elements are contiguous.
struct AttentionHeads {
  void* data;
  int64_t heads, batch_stride, head_stride, row_stride;
};
struct AttentionDims {
  int64_t batch_heads, q_len, kv_len, head_dim;  // head_dim <= kMaxAttentionHeadDim
  bool causal;
  float scale;
};
inline constexpr int64_t kMaxAttentionHeadDim = 128;
// out = softmax(q k^T * scale (+ the causal mask: key j <= query i)) v and
// lse [batch_heads * q_len] (float32, natural log), flash-attention style:
// tiles of queries against tiles of keys with an online softmax, no T x T
// matrix. Every operand of `dtype` (float32 or bfloat16), float32 inside.
void launch_attention_forward(DType dtype, const AttentionDims& s, AttentionHeads q,
                              AttentionHeads k, AttentionHeads v, AttentionHeads out, float* lse,
                              cudaStream_t stream);
// dq, dk, dv (overwritten) from dout, recomputing the probabilities from
// lse; delta: [batch_heads * q_len] float32 scratch (rowsum(dout * out)).
// One kernel owns each key's dk, dv and another each query's dq: no atomics,
// the same bits every run.
void launch_attention_backward(DType dtype, const AttentionDims& s, AttentionHeads q,
                               AttentionHeads k, AttentionHeads v, AttentionHeads out,
                               const float* lse, AttentionHeads dout, AttentionHeads dq,
                               AttentionHeads dk, AttentionHeads dv, float* delta,
                               cudaStream_t stream);

}  // namespace cohort::cuda
