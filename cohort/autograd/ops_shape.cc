// Views and shape ops: forward shares storage; backward maps the gradient
// back to the input's shape.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;

namespace {

// Records out as a view of x whose gradient is fn(g).
template <typename F>
Tensor record_view(Tensor out, const Tensor& x, const char* name, F fn) {
  return record(out, name, {x}, [fn](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{fn(g)};
  });
}

// Gradient of a view that selects part of x: zeros of x's shape with g
// written into the same view of them.
Tensor scatter_into_zeros(const Tensor& g, const Shape& sizes, DType dt,
                          const std::function<Tensor(const Tensor&)>& same_view) {
  Tensor z = Tensor::zeros(sizes, dt);
  same_view(z).copy_(g);
  return z;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape in = x.sizes();
  return record_view(x.reshape(shape).detach(), x, "reshape",
                     [in](const Tensor& g) { return g.reshape(in); });
}

Tensor view(const Tensor& x, const Shape& shape) {
  Shape in = x.sizes();
  return record_view(x.view(shape), x, "view", [in](const Tensor& g) { return g.reshape(in); });
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  Shape in = x.sizes();
  return record_view(x.flatten(start_dim, end_dim).detach(), x, "flatten",
                     [in](const Tensor& g) { return g.reshape(in); });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  return record_view(x.transpose(d0, d1), x, "transpose",
                     [d0, d1](const Tensor& g) { return g.transpose(d0, d1); });
}

Tensor permute(const Tensor& x, const Shape& dims) {
  Shape inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inv[wrap_dim(dims[i], static_cast<int64_t>(dims.size()), "permute")] = static_cast<int64_t>(i);
  return record_view(x.permute(dims), x, "permute",
                     [inv](const Tensor& g) { return g.permute(inv); });
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  Shape in = x.sizes();
  return record_view(x.unsqueeze(dim), x, "unsqueeze",
                     [in](const Tensor& g) { return g.reshape(in); });
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  Shape in = x.sizes();
  return record_view(x.squeeze(dim), x, "squeeze", [in](const Tensor& g) { return g.reshape(in); });
}

Tensor squeeze(const Tensor& x) {
  Shape in = x.sizes();
  return record_view(x.squeeze(), x, "squeeze", [in](const Tensor& g) { return g.reshape(in); });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Tensor out = x.narrow(dim, start, length);
  Shape in = x.sizes();
  DType dt = x.dtype();
  return record_view(out, x, "narrow", [=](const Tensor& g) {
    return scatter_into_zeros(g, in, dt,
                              [&](const Tensor& z) { return z.narrow(dim, start, length); });
  });
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  dim = wrap_dim(dim, x.dim(), "slice");
  const int64_t n = x.sizes()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return narrow(x, dim, start, end - start);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  Tensor out = x.select(dim, index);
  Shape in = x.sizes();
  DType dt = x.dtype();
  return record_view(out, x, "select", [=](const Tensor& g) {
    return scatter_into_zeros(g, in, dt, [&](const Tensor& z) { return z.select(dim, index); });
  });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Shape in = x.sizes();
  return record_view(x.expand(shape), x, "expand",
                     [in](const Tensor& g) { return native::sum_to(g, in); });
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return record_view(x.contiguous(), x, "contiguous", [](const Tensor& g) { return g; });
}

Tensor to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  DType src = x.dtype();
  return record_view(x.to(dtype), x, "to", [src](const Tensor& g) { return g.to(src); });
}

}  // namespace cohort
