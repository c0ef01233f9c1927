// CUDA kernels of kernels::cross_entropy and cross_entropy_backward
// (core/kernels/cross_entropy.h) over the launchers of
// cross_entropy_kernels.cu.
#include "cohort/core/kernels/cross_entropy.h"
#include "cohort/base/error.h"
#include "cohort/core/shape.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

// logits as contiguous [n, c] and target as contiguous [n], checked.
struct Rows {
  Tensor logits, target;
  int64_t n, c;
};

Rows rows(const Tensor& logits, const Tensor& target, const char* op) {
  COHORT_CHECK(logits.dim() == 1 || logits.dim() == 2,
               "{}: logits must be [N, C] or [C], got {} (the [N, C, d...] form is not "
               "supported: move C last and flatten to [N*d, C])",
               op, shape_str(logits.sizes()));
  COHORT_CHECK(logits.dtype() == DType::kFloat32 || logits.dtype() == DType::kBFloat16,
               "{}: CUDA kernel takes float32 or bfloat16 logits, got {}", op,
               dtype_name(logits.dtype()));
  COHORT_CHECK(target.dtype() == DType::kInt64 || target.dtype() == DType::kInt32 ||
                   target.dtype() == DType::kUInt8,
               "{}: target must hold int64, int32 or uint8 class indices, got {}", op,
               dtype_name(target.dtype()));
  Tensor l2 = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  Tensor t1 = target.dim() == 0 ? target.reshape({1}) : target;
  COHORT_CHECK(t1.dim() == 1 && t1.sizes()[0] == l2.sizes()[0],
               "{}: target {} does not match logits {} (need [N] with N = {})", op,
               shape_str(target.sizes()), shape_str(logits.sizes()), l2.sizes()[0]);
  Rows r{l2.contiguous(), t1.contiguous(), l2.sizes()[0], l2.sizes()[1]};
  COHORT_CHECK(r.c > 0 || r.n == 0, "{}: logits {} have no classes", op, shape_str(logits.sizes()));
  return r;
}

kernels::CrossEntropyResult cuda_cross_entropy(const Tensor& logits, const Tensor& target,
                                               Reduction reduction, int64_t ignore_index) {
  Rows s = rows(logits, target, "cross_entropy");
  Device d = logits.device();
  cudaStream_t stream = current_cuda_stream(d);
  kernels::CrossEntropyResult r;
  r.lse = Tensor::empty({s.n}, DType::kFloat32, d);
  Tensor per = Tensor::empty({s.n}, DType::kFloat32, d);
  launch_cross_entropy_forward(s.logits.dtype(), s.logits.device_data(), s.target.dtype(),
                               s.target.device_data(), r.lse.device_ptr<float>(),
                               per.device_ptr<float>(), s.n, s.c, ignore_index, stream);
  if (reduction == Reduction::kNone) {
    r.loss = logits.dim() == 1 ? per.reshape({}) : per;
    return r;
  }
  r.loss = Tensor::empty({}, DType::kFloat32, d);
  launch_cross_entropy_reduce(per.device_ptr<float>(), s.target.dtype(), s.target.device_data(),
                              r.loss.device_ptr<float>(), s.n, ignore_index,
                              reduction == Reduction::kMean, stream);
  return r;
}

Tensor cuda_cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                                   const Tensor& lse, Reduction reduction, int64_t ignore_index) {
  Rows s = rows(logits, target, "cross_entropy_backward");
  COHORT_CHECK(lse.dtype() == DType::kFloat32 && lse.numel() == s.n,
               "cross_entropy_backward: lse must be the device forward's float32 [{}], got {} {}",
               s.n, dtype_name(lse.dtype()), shape_str(lse.sizes()));
  const bool per_row = reduction == Reduction::kNone;
  COHORT_CHECK(grad.numel() == (per_row ? s.n : 1),
               "cross_entropy_backward: grad {} does not fit reduction over {} rows",
               shape_str(grad.sizes()), s.n);
  Device d = logits.device();
  cudaStream_t stream = current_cuda_stream(d);
  Tensor g = grad.to(DType::kFloat32).contiguous(), l = lse.contiguous();
  Tensor dx = Tensor::empty({s.n, s.c}, s.logits.dtype(), d);
  const bool mean = reduction == Reduction::kMean;
  Tensor count = mean ? Tensor::empty({1}, DType::kFloat32, d) : Tensor();
  launch_cross_entropy_backward(
      s.logits.dtype(), s.logits.device_data(), s.target.dtype(), s.target.device_data(),
      l.device_ptr<float>(), g.device_ptr<float>(), per_row, mean,
      mean ? count.device_ptr<float>() : nullptr, dx.device_data(), s.n, s.c, ignore_index, stream);
  return logits.dim() == 1 ? dx.reshape({s.c}) : dx;
}

}  // namespace

void register_cross_entropy_kernels() {
  kernels::cross_entropy_device.set(DeviceType::kCUDA, &cuda_cross_entropy);
  kernels::cross_entropy_backward_device.set(DeviceType::kCUDA, &cuda_cross_entropy_backward);
}

}  // namespace cohort::cuda
