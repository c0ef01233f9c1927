// Indexing and joining kernels (not recorded by autograd). Index tensors are
// integer (int64, int32 or uint8); out-of-range indices throw
// InvalidArgument naming the op, the index and the bound.
#pragma once

#include <vector>

#include "cohort/core/device_dispatch.h"
#include "cohort/core/random.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

// out = x.index_select(dim, index): index 1-D, out has index.numel() at dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// An index argument as contiguous int64 on its device (int32 and uint8
// accepted); InvalidArgument naming `op` for other dtypes. Shared by the
// device kernels' entry points.
Tensor as_index(const Tensor& index, const char* op);
// out = zeros(sizes); out.index_add_(dim, index, src) (sums repeated indices).
Tensor index_add(const Shape& sizes, DType dtype, int64_t dim, const Tensor& index,
                 const Tensor& src);
// torch.gather: out[i][j] = x[i][index[i][j]] (for dim = 1); index has x's rank.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// zeros(sizes).scatter_add_(dim, index, src) (the backward of gather).
Tensor scatter_add(const Shape& sizes, DType dtype, int64_t dim, const Tensor& index,
                   const Tensor& src);
// Joins along an existing dim; all shapes equal except at dim; dtypes promote.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// torch.tril (lower) / torch.triu: x [..., R, C] (at least 2-D, any dtype)
// keeps x[..., i, j] where j - i <= diagonal (lower) or j - i >= diagonal
// (upper) and zeroes the rest.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower);
// torch.masked_fill: mask (integer, nonzero = true) and x broadcast together;
// out = mask ? value : x, in x's dtype.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Inverted dropout: mask (x's dtype) holds 0 or 1/(1-p); out = x * mask.
struct DropoutResult {
  Tensor out, mask;
};
DropoutResult dropout(const Tensor& x, double p, Generator& gen);

// Device kernels (device_dispatch.h) of the ops above.
extern DeviceOp<Tensor(const Tensor&, int64_t, const Tensor&)> index_select_device;
extern DeviceOp<Tensor(const Tensor&, int64_t, const Tensor&)> gather_device;
extern DeviceOp<Tensor(const Shape&, DType, int64_t, const Tensor&, const Tensor&)>
    scatter_add_device;
extern DeviceOp<Tensor(const Shape&, DType, int64_t, const Tensor&, const Tensor&)>
    index_add_device;
extern DeviceOp<Tensor(const Tensor&, int64_t, bool)> triangle_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&, double)> masked_fill_device;
extern DeviceOp<DropoutResult(const Tensor&, double, Generator&)> dropout_device;

}  // namespace cohort::native
