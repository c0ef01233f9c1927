// Reductions (not recorded by autograd). Float sums accumulate in double, so
// results are closer to the exact value than PyTorch's float32 cascade (the
// difference is below float32 tolerance for the sizes tests use). Integer
// sums give int64. `dims` may be negative; an empty `dims` reduces all.
// Parallel over output elements under the caller's thread budget. Float32
// sums run per-ISA vector loops on the avx2 / avx512 kernel paths
// (vec_kernels.h): column sums give the baseline's bits, row sums add in
// another order (in double; the float results agree to within an ulp).
#pragma once

#include <utility>

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Sums grad over the dims that broadcasting expanded so it has `shape`
// (the backward of broadcasting). Returns grad itself when shapes match.
Tensor sum_to(const Tensor& grad, const Shape& shape);
// Values and int64 indices of the max / min along dim (first occurrence on ties;
// NaN counts as the max, as in PyTorch).
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max_all(const Tensor& x);  // 0-d
Tensor min_all(const Tensor& x);  // 0-d

// Device kernels (device_dispatch.h) of sum, mean, max and min; sum_to,
// argmax, max_all and min_all reach them through those.
extern DeviceOp<Tensor(const Tensor&, const Shape&, bool)> sum_device;
extern DeviceOp<Tensor(const Tensor&, const Shape&, bool)> mean_device;
extern DeviceOp<std::pair<Tensor, Tensor>(const Tensor&, int64_t, bool)> max_device;
extern DeviceOp<std::pair<Tensor, Tensor>(const Tensor&, int64_t, bool)> min_device;

// Plain loop version of sum over dims (the oracle in tests).
Tensor sum_reference(const Tensor& x, const Shape& dims, bool keepdim);

// Normalises dims (wraps negatives, sorts, rejects repeats); empty -> all dims.
std::vector<bool> reduce_mask(const Shape& dims, int64_t ndim, const char* op);
// Output shape of a reduction.
Shape reduced_shape(const Shape& sizes, const std::vector<bool>& mask, bool keepdim);

}  // namespace cohort::native
