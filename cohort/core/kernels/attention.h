// Scaled dot-product attention on raw float32 buffers, the compute behind
// cohort::scaled_dot_product_attention: out = softmax(q k^T * scale + mask) v,
// forward and backward, in the flash-attention way (blocks of kAttentionBlock
// queries x kAttentionBlock keys, an online softmax with a running maximum and
// sum per row). No T x T matrix is ever kept: the forward pass saves only the
// output and each row's log-sum-exp, and the backward pass recomputes the
// scores block by block (with delta = rowsum(dout * out)). Scratch memory is
// attention_scratch_floats() per task, O(block x D), independent of T.
// The *_reference twins materialise the scores in double: the test oracles.
//
// Shapes: bh = batch x heads flattened; q [bh, q_len, D], k and v
// [bh, kv_len, D], out [bh, q_len, D], lse [bh, q_len] (contiguous, natural
// log). Each operand is given as HeadRows: where row t of head bh starts; its
// D floats are contiguous, the rows and heads may be strided (so the
// transposed [B, H, T, D] views of a [B, T, 3C] projection need no copy).
// causal: query i attends keys j <= i (PyTorch's is_causal, the top-left
// tril(ones(q_len, kv_len)) when q_len != kv_len); blocks entirely above the
// diagonal are skipped. With that alignment no row is fully masked as long
// as kv_len >= 1, which check_attention_shape requires.
// Determinism: every output element is computed by one task in a fixed order,
// so results are the same bits whatever the thread count and scheduling (on
// one kernel path; paths differ in rounding).
// Ownership: the caller owns every buffer; outputs must not alias inputs.
// Thread safety: reentrant; each call uses at most cohort::num_threads()
// threads of the caller.
// Failure: an invalid shape throws cohort::InvalidArgument before anything is
// written.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cohort/core/dtype.h"

namespace cohort::kernels {

// Queries and keys per block (both): 64 x 64 tiles of scores.
constexpr int64_t kAttentionBlock = 64;

struct AttentionShape {
  int64_t batch_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  bool causal = false;
  double scale = 0;  // usually 1 / sqrt(head_dim); any finite value
};

// Where the rows of each head of one operand live: head bh = b * heads + h
// starts at data + b * batch_stride + h * head_stride, and row t of it at
// + t * row_stride; the head_dim floats of a row are contiguous.
template <class T>
struct HeadRows {
  T* data = nullptr;
  int64_t heads = 1;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  T* head(int64_t bh) const {
    return data + (bh / heads) * batch_stride + (bh % heads) * head_stride;
  }
  // A writable layout read as an input (out for the backward pass).
  operator HeadRows<const T>() const requires(!std::is_const_v<T>) {
    return {data, heads, batch_stride, head_stride, row_stride};
  }
};
using ConstHeadRows = HeadRows<const float>;
using Bf16HeadRows = HeadRows<const BFloat16>;

// The layout of a contiguous [bh, rows, head_dim] buffer.
template <class T>
HeadRows<T> contiguous_heads(T* data, int64_t rows, int64_t head_dim) {
  return HeadRows<T>{data, 1, rows * head_dim, 0, head_dim};
}

// Throws cohort::InvalidArgument naming `op` for negative sizes, head_dim < 1,
// kv_len < 1 (with q_len >= 1: a row with no key to attend), a non-finite
// scale, or sizes whose products overflow.
void check_attention_shape(const AttentionShape& s, const char* op);

// Floats of scratch one task of the blocked kernels uses (per thread at
// once): a few kAttentionBlock x kAttentionBlock tiles and head_dim x
// kAttentionBlock packed keys; it does not depend on q_len or kv_len.
int64_t attention_scratch_floats(const AttentionShape& s);

// out = softmax(q k^T * scale (+ causal mask)) v; lse[bh * q_len + i] = the
// natural log of row i's softmax denominator, including the maximum.
void attention_forward(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k, ConstHeadRows v,
                       HeadRows<float> out, float* lse);

// Gradients from dout (out's shape) and what the forward pass saved (out,
// lse): overwrites dq (q's shape), dk and dv (k's shape).
void attention_backward(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k, ConstHeadRows v,
                        ConstHeadRows out, const float* lse, ConstHeadRows dout, HeadRows<float> dq,
                        HeadRows<float> dk, HeadRows<float> dv);

// The same on bfloat16 operands (what backward keeps under a bf16
// PrecisionPolicy). Two ways:
//  - bf16_products false, or not supported here: each task widens the heads
//    it reads to float32 (exact) in its own scratch, so the results have the
//    bits of the float32 functions on the widened values, without a widened
//    copy of the whole tensors. The scratch grows by O((q_len + kv_len) x
//    head_dim) floats per task.
//  - bf16_products, where attention_bf16_products_supported(s) (AVX512-BF16,
//    head_dim a multiple of 32): every product on vdpbf16ps with float32
//    accumulation, P and dS rounded to bf16 before they are multiplied, as
//    flash attention's bf16 kernels do (attention_dp.h); softmax statistics
//    and row sums stay float32. Results within bf16 rounding of the above.
//    The scratch grows by O((q_len + kv_len) x head_dim) bf16 per task (a
//    head's packed blocks, kept while its tasks run).
void attention_forward(const AttentionShape& s, Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v,
                       HeadRows<float> out, float* lse, bool bf16_products = false);
void attention_backward(const AttentionShape& s, Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v,
                        Bf16HeadRows out, const float* lse, Bf16HeadRows dout, HeadRows<float> dq,
                        HeadRows<float> dk, HeadRows<float> dv, bool bf16_products = false);
bool attention_bf16_products_supported(const AttentionShape& s);

void attention_forward_reference(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k,
                                 ConstHeadRows v, HeadRows<float> out, float* lse);
// Ignores out and lse (recomputes them in double); same contract otherwise.
void attention_backward_reference(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k,
                                  ConstHeadRows v, ConstHeadRows out, const float* lse,
                                  ConstHeadRows dout, HeadRows<float> dq, HeadRows<float> dk,
                                  HeadRows<float> dv);

}  // namespace cohort::kernels
