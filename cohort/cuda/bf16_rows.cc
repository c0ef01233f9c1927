// CUDA kernels of the bf16 linear layers' row passes (core/kernels/bf16_rows.h),
// what autograd's linear and linear_gelu run under a bf16 PrecisionPolicy:
// the products through cuBLASLt (bf16 operands, float32 accumulation, GELU in
// the epilogue), the rest from the elementwise kernels of gelu_kernels.cu and
// the device's conversions (copy_, rounding to nearest even).
#include "cohort/core/kernels/bf16_rows.h"
#include "cohort/base/error.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/reduce.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/gemm.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

// Column sums of a contiguous float32 [rows, n] on its device (the bias
// gradients): reduce.cu's, split over the rows as well as the columns so
// that GPT-2's widths (24 to 96 blocks of 32 columns) fill the device.
Tensor column_sums(const Tensor& x) { return native::sum(x, {0}); }

kernels::Bf16Rows cuda_to_bf16_with_column_sums(const Tensor& g_in, bool need_sums) {
  Tensor g = g_in.contiguous();
  kernels::Bf16Rows r{native::to_bf16(g), Tensor()};
  if (need_sums) r.sums = column_sums(g);
  return r;
}

kernels::GeluBf16 cuda_linear_gelu_tanh_bf16(const Tensor& x16, const Tensor& w16,
                                             const Tensor& b) {
  LinearForward f = linear_forward(x16, w16, b, "linear_gelu_tanh_bf16", /*gelu=*/true);
  const int64_t n = w16.sizes()[0];
  Tensor out = f.out.reshape({-1, n}), pre = f.pre.reshape({-1, n});
  return {out, native::to_bf16(pre), native::to_bf16(out)};
}

// dh = g * gelu_tanh'(pre16) (g float32 [rows, n]): rounded, and its sums.
kernels::Bf16Rows gelu_backward_rows(const Tensor& g_in, const Tensor& pre16, bool need_sums) {
  Tensor g = g_in.contiguous(), pre = native::bf16_to_float(pre16.contiguous());
  Tensor dh = Tensor::empty(g.sizes(), DType::kFloat32, g.device());
  launch_gelu_tanh_backward(DType::kFloat32, g.device_data(), pre.device_data(), dh.device_data(),
                            g.numel(), current_cuda_stream(g.device()));
  kernels::Bf16Rows r{native::to_bf16(dh), Tensor()};
  if (need_sums) r.sums = column_sums(dh);
  return r;
}

kernels::Bf16Rows cuda_gelu_tanh_backward_through_linear_bf16(const Tensor& g16, const Tensor& w16,
                                                              const Tensor& pre16, bool need_sums) {
  // g = g16 w16, float32; the Bf16Path is the CPU's (ignored on a device).
  Tensor g = native::mm_bf16(g16, w16, native::Bf16Path::kEmulated);
  return gelu_backward_rows(g, pre16, need_sums);
}

}  // namespace

void register_bf16_rows_kernels() {
  kernels::to_bf16_with_column_sums_device.set(DeviceType::kCUDA, &cuda_to_bf16_with_column_sums);
  kernels::linear_gelu_tanh_bf16_device.set(DeviceType::kCUDA, &cuda_linear_gelu_tanh_bf16);
  kernels::gelu_tanh_backward_bf16_device.set(DeviceType::kCUDA, &gelu_backward_rows);
  kernels::gelu_tanh_backward_through_linear_bf16_device.set(
      DeviceType::kCUDA, &cuda_gelu_tanh_backward_through_linear_bf16);
}

}  // namespace cohort::cuda
