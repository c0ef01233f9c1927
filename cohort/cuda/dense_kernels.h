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

}  // namespace cohort::cuda
