#include "cohort/core/native/softmax.h"

#include <cmath>

#include "cohort/core/dispatch.h"
#include "cohort/core/loops.h"

namespace cohort::native {
namespace {

enum class Kind { kSoftmax, kLogSoftmax };

// Moves `dim` last and makes rows contiguous; `back` undoes the move.
Tensor rows_view(const Tensor& x, int64_t dim) {
  return dim == x.dim() - 1 ? x.contiguous() : x.transpose(dim, -1).contiguous();
}
Tensor from_rows(const Tensor& r, int64_t dim, int64_t ndim) {
  return dim == ndim - 1 ? r : r.transpose(dim, -1).contiguous();
}

template <typename T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t n, Kind kind) {
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const T* xr = x + r * n;
                   T* yr = y + r * n;
                   T mx = xr[0];
                   for (int64_t i = 1; i < n; ++i) mx = xr[i] > mx ? xr[i] : mx;
                   double s = 0;
                   for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(xr[i] - mx));
                   if (kind == Kind::kLogSoftmax) {
                     T lse = mx + static_cast<T>(std::log(s));
                     for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - lse;
                   } else {
                     T inv = static_cast<T>(1.0 / s);
                     for (int64_t i = 0; i < n; ++i) yr[i] = std::exp(xr[i] - mx) * inv;
                   }
                 }
               });
}

Tensor forward(const Tensor& x, int64_t dim, Kind kind, const char* op) {
  if (x.dim() == 0) return forward(x.reshape({1}), 0, kind, op).reshape({});
  dim = wrap_dim(dim, x.dim(), op);
  Tensor xr = rows_view(x, dim);
  Tensor yr = Tensor::empty(xr.sizes(), x.dtype());
  const int64_t n = xr.size(-1), rows = n ? xr.numel() / n : 0;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(xr.data_ptr<T>(), yr.data_ptr<T>(), rows, n, kind);
  });
  return from_rows(yr, dim, x.dim());
}

Tensor backward(const Tensor& grad, const Tensor& out, int64_t dim, Kind kind, const char* op) {
  if (out.dim() == 0) return backward(grad.reshape({1}), out.reshape({1}), 0, kind, op).reshape({});
  dim = wrap_dim(dim, out.dim(), op);
  Tensor gr = rows_view(grad, dim), yr = rows_view(out, dim);
  Tensor dx = Tensor::empty(gr.sizes(), grad.dtype());
  const int64_t n = gr.size(-1), rows = n ? gr.numel() / n : 0;
  dispatch_floating(grad.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gr.data_ptr<T>();
    const T* y = yr.data_ptr<T>();
    T* d = dx.data_ptr<T>();
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const T* gi = g + r * n;
                     const T* yi = y + r * n;
                     T* di = d + r * n;
                     double s = 0;
                     if (kind == Kind::kLogSoftmax) {
                       for (int64_t i = 0; i < n; ++i) s += gi[i];
                       T st = static_cast<T>(s);
                       for (int64_t i = 0; i < n; ++i) di[i] = gi[i] - std::exp(yi[i]) * st;
                     } else {
                       for (int64_t i = 0; i < n; ++i) s += static_cast<double>(gi[i]) * yi[i];
                       T st = static_cast<T>(s);
                       for (int64_t i = 0; i < n; ++i) di[i] = yi[i] * (gi[i] - st);
                     }
                   }
                 });
  });
  return from_rows(dx, dim, out.dim());
}

}  // namespace

DeviceOp<Tensor(const Tensor&, int64_t)> softmax_device("softmax");
DeviceOp<Tensor(const Tensor&, int64_t)> log_softmax_device("log_softmax");
DeviceOp<Tensor(const Tensor&, const Tensor&, int64_t)> log_softmax_backward_device(
    "log_softmax_backward");
DeviceOp<Tensor(const Tensor&, const Tensor&, int64_t)> softmax_backward_device("softmax_backward");

Tensor softmax(const Tensor& x, int64_t dim) {
  if (!x.is_cpu()) return softmax_device(x.device(), x, dim);
  return forward(x, dim, Kind::kSoftmax, "softmax");
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (!x.is_cpu()) return log_softmax_device(x.device(), x, dim);
  return forward(x, dim, Kind::kLogSoftmax, "log_softmax");
}

Tensor log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  if (Device d = op_device("log_softmax_backward", {&grad, &out}); !d.is_cpu())
    return log_softmax_backward_device(d, grad, out, dim);
  return backward(grad, out, dim, Kind::kLogSoftmax, "log_softmax_backward");
}

Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  if (Device d = op_device("softmax_backward", {&grad, &out}); !d.is_cpu())
    return softmax_backward_device(d, grad, out, dim);
  return backward(grad, out, dim, Kind::kSoftmax, "softmax_backward");
}

Tensor log_softmax_reference(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "log_softmax");
  Tensor xr = x.transpose(dim, -1).contiguous().to(DType::kFloat64);
  const int64_t n = xr.size(-1), rows = xr.numel() / n;
  std::vector<double> v = xr.to_vector<double>(), out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(v[r * n + i]);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = v[r * n + i] - std::log(s);
  }
  return Tensor::from_vector(out, xr.sizes()).transpose(dim, -1).contiguous().to(x.dtype());
}

}  // namespace cohort::native
