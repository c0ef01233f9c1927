// native/reduce.h's sum, mean, max and min on a CUDA device. A sum whose
// reduced dims lead a contiguous tensor (a bias gradient over the batch) is
// summed down its columns in place; any other is made [kept, reduced]
// contiguous (a copy unless the reduced dims are already innermost) and
// summed along its rows. Accumulation is in double (int64 for integers), as
// on the CPU, so float32 results agree with the CPU's to about an ulp
// whatever the length.
#include "cohort/core/native/reduce.h"

#include <limits>

#include "cohort/cuda/pointwise_host.h"
#include "cohort/cuda/pointwise_launch.h"
#include "cohort/cuda/pointwise_register.h"

namespace cohort::cuda {
namespace {

Tensor reduce_sum(const Tensor& x, const Shape& dims, bool keepdim, bool is_mean) {
  const char* op = is_mean ? "mean" : "sum";
  COHORT_CHECK(!is_mean || is_floating(x.dtype()), "mean: needs a floating tensor, got {}",
               dtype_name(x.dtype()));
  const int64_t nd = x.dim();
  const std::vector<bool> mask = native::reduce_mask(dims, nd, op);
  const Shape out_shape = native::reduced_shape(x.sizes(), mask, keepdim);
  const DType odt = is_floating(x.dtype()) ? x.dtype() : DType::kInt64;
  Device d = x.device();
  Tensor out = Tensor::empty(out_shape, odt, d);
  Shape perm;
  int64_t inner = 1, outer = 1;
  for (int64_t i = 0; i < nd; ++i)
    if (!mask[i]) perm.push_back(i), outer *= x.sizes()[i];
  for (int64_t i = 0; i < nd; ++i)
    if (mask[i]) perm.push_back(i), inner *= x.sizes()[i];
  if (out.numel() == 0) return out;
  if (inner == 0) {
    // The CPU's sum of nothing, and its mean (0 * 1/0).
    out.fill_(is_mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return out;
  }
  const double scale = is_mean ? 1.0 / static_cast<double>(inner) : 1.0;
  // Reduced dims before every kept dim (size-1 dims aside): x is [inner, outer].
  bool leading = true;
  for (int64_t i = 0; i < nd && leading; ++i) {
    if (mask[i]) continue;
    for (int64_t j = i + 1; j < nd; ++j)
      if (mask[j] && x.sizes()[j] != 1) leading = false;
    break;
  }
  cudaStream_t stream = stream_of(out);
  if (leading && outer > 1 && x.is_contiguous()) {
    Tensor scratch = Tensor::empty({column_sum_scratch(inner, outer)}, DType::kFloat64, d);
    launch_sum_columns(x.dtype(), x.device_data(), inner, outer, odt, out.device_data(), scale,
                       scratch.device_data(), stream);
    return out;
  }
  Tensor xp = x.permute(perm).contiguous();
  Tensor scratch = Tensor::empty({row_sum_scratch(outer, inner)}, DType::kFloat64, d);
  launch_sum_rows(x.dtype(), xp.device_data(), outer, inner, odt, out.device_data(), scale,
                  scratch.device_data(), stream);
  return out;
}

Tensor cuda_sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_sum(x, dims, keepdim, false);
}

Tensor cuda_mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_sum(x, dims, keepdim, true);
}

std::pair<Tensor, Tensor> extreme(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  COHORT_CHECK(x.dim() > 0, "{}: needs at least 1 dim", op);
  dim = wrap_dim(dim, x.dim(), op);
  const int64_t n = x.sizes()[dim];
  COHORT_CHECK(n > 0, "{}: dim {} has size 0", op, dim);
  // The reduced dim last, the others in order: rows come out in the output's order.
  Shape perm, out_shape;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != dim) perm.push_back(i), out_shape.push_back(x.sizes()[i]);
  perm.push_back(dim);
  Tensor xt = x.permute(perm).contiguous();
  Tensor values = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor indices = Tensor::empty(out_shape, DType::kInt64, x.device());
  launch_extreme_rows(is_max, x.dtype(), xt.device_data(), values.numel(), n, values.device_data(),
                      indices.device_ptr<int64_t>(), stream_of(values));
  if (keepdim) return {values.unsqueeze(dim), indices.unsqueeze(dim)};
  return {values, indices};
}

std::pair<Tensor, Tensor> cuda_max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(x, dim, keepdim, true);
}

std::pair<Tensor, Tensor> cuda_min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(x, dim, keepdim, false);
}

}  // namespace

void register_reduce_kernels() {
  native::sum_device.set(DeviceType::kCUDA, &cuda_sum);
  native::mean_device.set(DeviceType::kCUDA, &cuda_mean);
  native::max_device.set(DeviceType::kCUDA, &cuda_max);
  native::min_device.set(DeviceType::kCUDA, &cuda_min);
}

}  // namespace cohort::cuda
