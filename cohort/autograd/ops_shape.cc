// Views and shape ops as free functions, as PyTorch users also call them
// (torch.reshape(x, ...)). The views are Tensor's members, which record
// autograd themselves (core/view_autograd.h; the recorder lives in node.cc).
#include "cohort/autograd/ops.h"

namespace cohort {

Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }
Tensor view(const Tensor& x, const Shape& shape) { return x.view(shape); }
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return x.flatten(start_dim, end_dim);
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) { return x.transpose(d0, d1); }
Tensor permute(const Tensor& x, const Shape& dims) { return x.permute(dims); }
Tensor unsqueeze(const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }
Tensor squeeze(const Tensor& x, int64_t dim) { return x.squeeze(dim); }
Tensor squeeze(const Tensor& x) { return x.squeeze(); }
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  return x.narrow(dim, start, length);
}
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  return x.slice(dim, start, end);
}
Tensor select(const Tensor& x, int64_t dim, int64_t index) { return x.select(dim, index); }
Tensor expand(const Tensor& x, const Shape& shape) { return x.expand(shape); }
Tensor contiguous(const Tensor& x) { return x.contiguous(); }
Tensor to(const Tensor& x, DType dtype) { return x.to(dtype); }

}  // namespace cohort
