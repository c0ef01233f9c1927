// 2-D max pooling on raw float32 buffers (NCHW, contiguous), the compute
// behind nn::MaxPool2d. Plain-loop *_reference twins are the test oracles.
//
// Shapes: x [batch, channels, in_h, in_w] -> y [batch, channels, out_h, out_w];
// argmax has y's shape and holds, for each output, the index (h * in_w + w)
// of the chosen element within its input plane. Padding acts as -inf; ties
// keep the first element in row-major window order and a NaN always wins (the
// last NaN of the window), as in PyTorch.
// Ownership: the caller owns every buffer; outputs must not alias inputs.
// Thread safety: reentrant; each call uses at most cohort::num_threads()
// threads of the caller.
// Failure: an invalid geometry throws cohort::InvalidArgument before anything
// is written.
#pragma once

#include <cstdint>

namespace cohort::kernels {

struct Pool2dGeometry {
  int64_t batch, channels, in_h, in_w, kernel_h, kernel_w, stride_h, stride_w;
  int64_t pad_h = 0, pad_w = 0;
  int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

// Throws cohort::InvalidArgument naming `op` for sizes < 1, strides < 1,
// padding < 0 or > half the kernel (PyTorch's rule), or an empty output.
void check_pool2d_geometry(const Pool2dGeometry& g, const char* op);

// y = max over each window; argmax (may not be null) records where it was.
void max_pool2d_forward(const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax);
// dx = scatter-add of dy at argmax; overwrites dx [batch, channels, in_h, in_w].
void max_pool2d_backward(const Pool2dGeometry& g, const float* dy, const int32_t* argmax,
                         float* dx);

void max_pool2d_forward_reference(const Pool2dGeometry& g, const float* x, float* y,
                                  int32_t* argmax);
void max_pool2d_backward_reference(const Pool2dGeometry& g, const float* dy, const int32_t* argmax,
                                   float* dx);

}  // namespace cohort::kernels
