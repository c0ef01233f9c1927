// Tensor::copy_ and fill_ on a CUDA device (core's copy_device and
// fill_device entries, tensor_device_ops.h); the kernels are in
// tensor_copy.cu.
#include "cohort/core/loops.h"
#include "cohort/core/native/bf16_rounding.h"
#include "cohort/core/tensor_device_ops.h"
#include "cohort/cuda/kernels.h"
#include "cohort/cuda/pointwise_launch.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

void cuda_copy(const Tensor& dst, const Tensor& src) {
  const Shape& sizes = dst.sizes();
  StridedPlan<2> plan = make_plan<2>(
      sizes, {dst.strides(), broadcast_strides(src.sizes(), src.strides(), sizes)}, "copy_");
  launch_copy(dst.device_data(), dst.dtype(), src.device_data(), src.dtype(), plan, dst.numel(),
              current_cuda_stream(dst.device()));
}

void cuda_fill(const Tensor& dst, double value) {
  StridedPlan<1> plan = make_plan<1>(dst.sizes(), {dst.strides()}, "fill_");
  launch_fill(dst.device_data(), dst.dtype(), value, plan, dst.numel(),
              current_cuda_stream(dst.device()));
}

Tensor cuda_to_bf16_stochastic(const Tensor& x_in, uint64_t seed, uint64_t offset) {
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.sizes(), kBFloat16, x.device());
  launch_to_bf16_stochastic(x.device_ptr<float>(), static_cast<uint16_t*>(y.device_data()),
                            x.numel(), seed, offset, current_cuda_stream(x.device()));
  return y;
}

}  // namespace

void register_tensor_kernels() {
  copy_device.set(DeviceType::kCUDA, &cuda_copy);
  fill_device.set(DeviceType::kCUDA, &cuda_fill);
  native::to_bf16_stochastic_device.set(DeviceType::kCUDA, &cuda_to_bf16_stochastic);
}

}  // namespace cohort::cuda
