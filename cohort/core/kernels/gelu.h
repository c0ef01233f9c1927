// GELU in its tanh form (PyTorch's F.gelu(x, approximate="tanh"), what GPT-2
// uses) and linear + GELU fused, the kernels behind cohort::gelu(x, "tanh")
// and cohort::linear_gelu (not recorded by autograd).
//
// Shapes: gelu_tanh keeps x's shape. linear_gelu: x [..., in], w [out, in],
// b [out] or undefined -> out and pre [..., out], pre = x w^T + b (the
// pre-activation, which the backward reads).
// float32 runs the row loops of transformer_rows.h for the kernel path in use
// (vectorised on avx2 / avx512); float64 the scalar formulas in double.
// linear_gelu (float32) splits the rows over the thread budget and, per block
// of rows, runs the GEMM (native::gemm) and then bias + GELU while the block
// is still in cache, instead of a second pass over the whole output.
// Thread safety: reentrant; each call uses at most cohort::num_threads().
// Failure: shape or dtype mismatches throw InvalidArgument naming the op and
// the shapes; dtypes other than float32/float64 throw NotSupported.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::kernels {

Tensor gelu_tanh(const Tensor& x);
// grad * gelu_tanh'(x); grad and x of one shape.
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x);

struct LinearGeluResult {
  Tensor out;  // gelu_tanh(pre)
  Tensor pre;  // x w^T + b
};
LinearGeluResult linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b);

struct LinearGeluGrads {
  Tensor dx, dw, db;  // undefined where not asked for
};
// grad of out's shape; x, w as given to linear_gelu, pre its result.
LinearGeluGrads linear_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                                     const Tensor& pre, bool need_dx, bool need_dw, bool need_db);

// Device kernels (device_dispatch.h) behind the four functions above, same
// contracts; on CUDA, bfloat16 tensors too for gelu_tanh and its backward
// (computed in float32, results in bfloat16), and linear_gelu's GELU runs in
// the GEMM's epilogue.
extern DeviceOp<Tensor(const Tensor& x)> gelu_tanh_device;
extern DeviceOp<Tensor(const Tensor& grad, const Tensor& x)> gelu_tanh_backward_device;
extern DeviceOp<LinearGeluResult(const Tensor& x, const Tensor& w, const Tensor& b)>
    linear_gelu_device;
extern DeviceOp<LinearGeluGrads(const Tensor& grad, const Tensor& x, const Tensor& w,
                                const Tensor& pre, bool need_dx, bool need_dw, bool need_db)>
    linear_gelu_backward_device;

}  // namespace cohort::kernels
