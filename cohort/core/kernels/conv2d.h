// 2-D convolution kernels on raw float32 buffers (NCHW, contiguous), the
// compute behind nn::Conv2d. Each kernel has a plain-loop *_reference twin
// that the tests use as the oracle; the fast versions are measured in
// bench/kernels. On the avx2 and avx512 kernel paths (cohort/base/cpu.h),
// batches of 8 and more work on 16 samples per element (one AVX-512 register
// or two AVX2 ones): 5x5 stride-1 layers with enough channels use Winograd
// F(4x4, 5x5) (about 6x fewer multiplies; largest rounding error about 4e-6
// of the largest output instead of 2e-7), other layers direct convolution.
// Smaller batches and the baseline path use im2col + OpenBLAS (one BLAS
// thread per call).
//
// Shapes (PyTorch conventions, groups = 1, dilation = 1):
//   x  [batch, in_channels, in_h, in_w]
//   w  [out_channels, in_channels, kernel_h, kernel_w]
//   b  [out_channels]
//   y  [batch, out_channels, out_h, out_w]
// Ownership: the caller owns every buffer; kernels never allocate the outputs
// and never keep pointers. Output buffers must not alias inputs.
// Thread safety: reentrant; any number of threads may call at once. Each call
// splits its work over at most cohort::num_threads() threads of the caller.
// Results are deterministic for a given thread budget (weight gradients sum
// per-thread partials in a fixed order, so they may differ in the last bits
// between budgets). Scratch memory is reused across calls (about 20 MB at
// most for Net's layers per concurrent caller).
// Failure: an invalid geometry (non-positive sizes, empty output) throws
// cohort::InvalidArgument before anything is written.
#pragma once

#include <cstdint>

namespace cohort::kernels {

struct Conv2dGeometry {
  int64_t batch, in_channels, in_h, in_w, out_channels, kernel_h, kernel_w;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

// Throws cohort::InvalidArgument naming `op` when g cannot describe a
// convolution (sizes < 1, strides < 1, padding < 0, kernel larger than the
// padded input).
void check_conv2d_geometry(const Conv2dGeometry& g, const char* op);

// Multiply-adds of one forward pass (x2 for FLOPs); the backward passes cost
// the same each.
int64_t conv2d_macs(const Conv2dGeometry& g);

// y = conv(x, w) + bias. bias may be null (no bias).
void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    float* y);
// Same with ReLU applied to the output (y = max(0, conv + bias)): the fused
// epilogue saves one pass over y.
void conv2d_forward_relu(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                         float* y);
// dx = conv_transpose(dy, w); overwrites dx [batch, in_channels, in_h, in_w].
void conv2d_backward_input(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
// dw = sum over batch and pixels of dy (x) x; dbias = sum of dy per channel.
// Overwrites dw [out_channels, in_channels, kernel_h, kernel_w] and dbias
// [out_channels] (dbias may be null).
void conv2d_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                            float* dbias);

// Both gradients in one call, sharing work between them (one transposition
// of dy per 16 samples on the Winograd path). With y_relu (the output of
// conv2d_forward_relu) dy is the gradient of that ReLU's output and is masked
// by y_relu > 0 on the fly, which saves a separate ReLU-backward pass.
// Each of dx, dw, dbias may be null (not computed); the rest as above.
void conv2d_backward(const Conv2dGeometry& g, const float* x, const float* w, const float* dy,
                     const float* y_relu, float* dx, float* dw, float* dbias);

// Plain loops, single-threaded: the oracles.
void conv2d_forward_reference(const Conv2dGeometry& g, const float* x, const float* w,
                              const float* bias, float* y);
void conv2d_backward_input_reference(const Conv2dGeometry& g, const float* dy, const float* w,
                                     float* dx);
void conv2d_backward_weight_reference(const Conv2dGeometry& g, const float* x, const float* dy,
                                      float* dw, float* dbias);

}  // namespace cohort::kernels
