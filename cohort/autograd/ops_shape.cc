// Views and shape ops as free functions, as PyTorch users also call them
// (torch.reshape(x, ...)). The views are Tensor's members, which record
// autograd themselves (core/view_autograd.h; the recorder lives in node.cc).
#include <algorithm>

#include <fmt/ranges.h>

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
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.size(dim);
  COHORT_CHECK(split_size > 0 || (split_size == 0 && n == 0),
               "split: split_size must be positive (0 only for an empty dim), got {} for dim {} "
               "of size {}",
               split_size, dim, n);
  std::vector<Tensor> parts;
  if (n == 0) return {x.narrow(dim, 0, 0)};
  for (int64_t at = 0; at < n; at += split_size)
    parts.push_back(x.narrow(dim, at, std::min(split_size, n - at)));
  return parts;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.size(dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    COHORT_CHECK(s >= 0, "split: sizes must be non-negative, got {}", fmt::join(sizes, ", "));
    total += s;
  }
  COHORT_CHECK(total == n, "split: sizes [{}] sum to {}, but dim {} of {} has size {}",
               fmt::join(sizes, ", "), total, dim, shape_str(x.sizes()), n);
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    parts.push_back(x.narrow(dim, at, s));
    at += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  COHORT_CHECK(chunks > 0, "chunk: chunks must be positive, got {}", chunks);
  dim = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(dim);
  if (n == 0) return std::vector<Tensor>(chunks, x.narrow(dim, 0, 0));  // as PyTorch
  return split(x, (n + chunks - 1) / chunks, dim);
}

Tensor contiguous(const Tensor& x) { return x.contiguous(); }
Tensor to(const Tensor& x, DType dtype) { return x.to(dtype); }

}  // namespace cohort
