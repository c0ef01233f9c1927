// CUDA kernels of max_pool2d forward and backward (core/kernels/pool2d_device.h)
// over the launchers of pool2d_kernels.cu.
#include "cohort/base/error.h"
#include "cohort/core/kernels/pool2d_device.h"
#include "cohort/core/shape.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

PoolShape pool_shape(const kernels::Pool2dGeometry& g) {
  return {g.batch * g.channels, g.in_h,     g.in_w,     g.out_h(), g.out_w(), g.kernel_h,
          g.kernel_w,           g.stride_h, g.stride_w, g.pad_h,   g.pad_w};
}

kernels::MaxPool2dResult cuda_max_pool2d(const kernels::Pool2dGeometry& g, const Tensor& x_in) {
  COHORT_CHECK(x_in.dtype() == DType::kFloat32, "max_pool2d: CUDA kernel takes float32, got {}",
               dtype_name(x_in.dtype()));
  kernels::check_pool2d_geometry(g, "max_pool2d");
  Tensor x = x_in.contiguous();
  Device d = x.device();
  kernels::MaxPool2dResult r;
  r.out = Tensor::empty({g.batch, g.channels, g.out_h(), g.out_w()}, DType::kFloat32, d);
  r.argmax = Tensor::empty(r.out.sizes(), DType::kInt32, d);
  launch_max_pool2d_forward(pool_shape(g), x.device_ptr<float>(), r.out.device_ptr<float>(),
                            r.argmax.device_ptr<int32_t>(), current_cuda_stream(d));
  return r;
}

Tensor cuda_max_pool2d_backward(const kernels::Pool2dGeometry& g, const Tensor& dy_in,
                                const Tensor& argmax) {
  const Shape out{g.batch, g.channels, g.out_h(), g.out_w()};
  COHORT_CHECK(dy_in.sizes() == out && argmax.sizes() == out,
               "max_pool2d_backward: grad {} and argmax {} must be {}", shape_str(dy_in.sizes()),
               shape_str(argmax.sizes()), shape_str(out));
  COHORT_CHECK(argmax.dtype() == DType::kInt32 && argmax.is_contiguous(),
               "max_pool2d_backward: argmax must be the forward's contiguous int32 tensor");
  Tensor dy = dy_in.to(DType::kFloat32).contiguous();
  Device d = dy.device();
  Tensor dx = Tensor::empty({g.batch, g.channels, g.in_h, g.in_w}, DType::kFloat32, d);
  launch_max_pool2d_backward(pool_shape(g), dy.device_ptr<float>(), argmax.device_ptr<int32_t>(),
                             dx.device_ptr<float>(), current_cuda_stream(d));
  return dx;
}

}  // namespace

void register_pool2d_kernels() {
  kernels::max_pool2d_forward_device.set(DeviceType::kCUDA, &cuda_max_pool2d);
  kernels::max_pool2d_backward_device.set(DeviceType::kCUDA, &cuda_max_pool2d_backward);
}

}  // namespace cohort::cuda
