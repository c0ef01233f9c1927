// CUDA kernels of kernels::gelu_tanh, gelu_tanh_backward, linear_gelu and
// linear_gelu_backward (core/kernels/gelu.h): the elementwise parts in
// gelu.cu, the products through cuBLASLt (gemm.h), GELU in the forward GEMM's
// epilogue.
#include "cohort/core/kernels/gelu.h"
#include "cohort/base/error.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/reduce.h"
#include "cohort/core/shape.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/gemm.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

void check_gelu_dtype(DType t, const char* op) {
  COHORT_CHECK(t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16,
               "{}: CUDA kernel takes float32, float64 or bfloat16, got {}", op, dtype_name(t));
}

Tensor cuda_gelu_tanh(const Tensor& x_in) {
  check_gelu_dtype(x_in.dtype(), "gelu");
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_gelu_tanh(x.dtype(), x.device_data(), y.device_data(), x.numel(),
                   current_cuda_stream(x.device()));
  return y;
}

Tensor cuda_gelu_tanh_backward(const Tensor& grad, const Tensor& x_in) {
  check_gelu_dtype(x_in.dtype(), "gelu_backward");
  Tensor x = x_in.contiguous(), g = grad.to(x.dtype()).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_gelu_tanh_backward(x.dtype(), g.device_data(), x.device_data(), dx.device_data(),
                            x.numel(), current_cuda_stream(x.device()));
  return dx;
}

kernels::LinearGeluResult cuda_linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b) {
  COHORT_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64,
               "linear_gelu: CUDA kernel takes float32 or float64, got {}", dtype_name(x.dtype()));
  LinearForward f = linear_forward(x, w, b, "linear_gelu", /*gelu=*/true);
  return {f.out, f.pre};
}

kernels::LinearGeluGrads cuda_linear_gelu_backward(const Tensor& grad, const Tensor& x,
                                                   const Tensor& w, const Tensor& pre, bool need_dx,
                                                   bool need_dw, bool need_db) {
  const int64_t in = w.sizes()[1], outf = w.sizes()[0];
  // d loss / d pre, [rows, out].
  Tensor dh = cuda_gelu_tanh_backward(grad, pre).reshape({-1, outf});
  kernels::LinearGeluGrads out;
  // The bias gradient through reduce.cu's column sums: split over the rows
  // as well as the columns (a block per 32 columns alone is 24 to 96 blocks
  // at GPT-2's widths), the partials added in a fixed order.
  if (need_db) out.db = native::sum(dh, {0});
  if (need_dx) out.dx = native::mm(dh, w).reshape(x.sizes());
  if (need_dw) out.dw = native::mm(dh.transpose(0, 1), x.reshape({-1, in}));
  return out;
}

}  // namespace

void register_gelu_kernels() {
  kernels::gelu_tanh_device.set(DeviceType::kCUDA, &cuda_gelu_tanh);
  kernels::gelu_tanh_backward_device.set(DeviceType::kCUDA, &cuda_gelu_tanh_backward);
  kernels::linear_gelu_device.set(DeviceType::kCUDA, &cuda_linear_gelu);
  kernels::linear_gelu_backward_device.set(DeviceType::kCUDA, &cuda_linear_gelu_backward);
}

}  // namespace cohort::cuda
