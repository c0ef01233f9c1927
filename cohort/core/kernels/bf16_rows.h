// The row passes of the bf16 linear layers (autograd's linear and
// linear_gelu under a bf16 PrecisionPolicy), each one read of its float32
// input instead of two or three (not recorded by autograd):
//  - to_bf16_with_column_sums: the incoming gradient g [rows, n] rounded to
//    bf16 for the products, and (need_sums) its column sums in float32 (the
//    bias gradient), accumulated as cross_entropy's and LayerNorm's are
//    (float blocks of ColumnSums::kFlushRows rows flushed into double).
//  - linear_gelu_tanh_bf16: out = gelu_tanh(pre) for pre = x16 w16^T + b
//    (native::linear_bf16), pre rounded to bf16 (what backward keeps) and
//    out rounded to bf16 (the next GEMM's operand), all three made as each
//    block of pre leaves the GEMM (its rows_done epilogue, while the block
//    is in cache): pre itself is never kept in float32.
//  - gelu_tanh_backward_bf16: dh = g * gelu_tanh'(pre16) rounded to bf16,
//    and (need_sums) dh's column sums (before rounding).
//  - gelu_tanh_backward_through_linear_bf16: the same where g = g16 w16 is
//    the gradient coming back through the linear the GELU feeds (w16 its
//    weight [out, n], g16 its output's gradient [rows, out]): dh made in that
//    GEMM's epilogue, block by block while in cache, so g is never a float32
//    matrix in memory. dh16 has the bits of gelu_tanh_backward_bf16 on
//    mm_bf16(g16, w16); the sums are added in another order (per GEMM block,
//    the blocks in order of their rows), so they differ in the last bits.
// Shapes: 2-D float32 [rows, n] (pre16 / results bf16 of the same shape);
// column sums [n]. Rounding to nearest even (native::to_bf16).
// Thread safety: reentrant; each call uses at most cohort::num_threads().
// Failure: wrong dtypes or shapes throw InvalidArgument naming the op.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/tensor.h"

namespace cohort::kernels {

struct Bf16Rows {
  Tensor rounded;  // bf16
  Tensor sums;     // float32 [n], undefined unless asked for
};
Bf16Rows to_bf16_with_column_sums(const Tensor& g, bool need_sums);

struct GeluBf16 {
  Tensor out;    // float32 gelu_tanh(pre)
  Tensor pre16;  // bf16(pre)
  Tensor out16;  // bf16(out)
};
// x16 bf16 [..., in], w16 bf16 [out, in], b float32 [out] or undefined;
// results [rows, out] (rows: x16's leading dims flattened).
GeluBf16 linear_gelu_tanh_bf16(const Tensor& x16, const Tensor& w16, const Tensor& b,
                               native::Bf16Path path);

// g float32 [rows, n], pre16 bf16 [rows, n].
Bf16Rows gelu_tanh_backward_bf16(const Tensor& g, const Tensor& pre16, bool need_sums);

// g16 bf16 [rows, out], w16 bf16 [out, n], pre16 bf16 [rows, n].
Bf16Rows gelu_tanh_backward_through_linear_bf16(const Tensor& g16, const Tensor& w16,
                                                const Tensor& pre16, bool need_sums,
                                                native::Bf16Path path);

// Device kernels (device_dispatch.h) behind the four functions above, the same
// contracts (the Bf16Path does not apply on a device); the column sums are
// float32 sums in a fixed order.
extern DeviceOp<Bf16Rows(const Tensor& g, bool need_sums)> to_bf16_with_column_sums_device;
extern DeviceOp<GeluBf16(const Tensor& x16, const Tensor& w16, const Tensor& b)>
    linear_gelu_tanh_bf16_device;
extern DeviceOp<Bf16Rows(const Tensor& g, const Tensor& pre16, bool need_sums)>
    gelu_tanh_backward_bf16_device;
extern DeviceOp<Bf16Rows(const Tensor& g16, const Tensor& w16, const Tensor& pre16, bool need_sums)>
    gelu_tanh_backward_through_linear_bf16_device;

}  // namespace cohort::kernels
