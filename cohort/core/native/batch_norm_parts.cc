#include "cohort/core/native/batch_norm_parts.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"

namespace cohort::native {
namespace {

struct Layout {
  int64_t n = 0, c = 0, inner = 0;
  int64_t count() const { return n * inner; }
};

Layout layout_of(const Tensor& x, const char* op) {
  COHORT_CHECK(x.defined() && x.dim() >= 2, "{}: input must be [N, C, *], got {}", op,
               x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  COHORT_CHECK(x.is_cpu(), "{}: input must be on the CPU, got {}", op, x.device().str());
  Layout l{x.sizes()[0], x.sizes()[1], 0};
  COHORT_CHECK(l.c > 0, "{}: input {} has no channels", op, shape_str(x.sizes()));
  l.inner = l.n ? x.numel() / (l.n * l.c) : 0;
  return l;
}

// A [C] statistic as contiguous float64; `t` may be undefined when optional.
Tensor channel_vector(const Tensor& t, int64_t c, const char* op, const char* what,
                      bool optional = false) {
  if (!t.defined()) {
    COHORT_CHECK(optional, "{}: {} is undefined", op, what);
    return t;
  }
  COHORT_CHECK(t.dim() == 1 && t.sizes()[0] == c, "{}: {} must be [{}], got {}", op, what, c,
               shape_str(t.sizes()));
  return t.to(kFloat64).contiguous();
}

// Planes (one sample's one channel) per parallel_for task: about 16k values.
int64_t plane_grain(int64_t inner) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1));
}

}  // namespace

BatchNormStats batch_norm_stats(const Tensor& x_in) {
  const Layout l = layout_of(x_in, "batch_norm_stats");
  Tensor x = x_in.contiguous();
  BatchNormStats r{Tensor::zeros({l.c}, kFloat64), Tensor::zeros({l.c}, kFloat64), l.count()};
  if (l.count() == 0) return r;
  double* pm = r.mean.data_ptr<double>();
  double* pv = r.var.data_ptr<double>();
  dispatch_floating(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    parallel_for(0, l.c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        // Two passes in double: the sum of squares about the mean, not
        // E[x^2] - E[x]^2, which cancels for inputs far from zero.
        double s = 0;
        for (int64_t i = 0; i < l.n; ++i) {
          const T* p = px + (i * l.c + ch) * l.inner;
          for (int64_t j = 0; j < l.inner; ++j) s += p[j];
        }
        const double mean = s / static_cast<double>(l.count());
        double v = 0;
        for (int64_t i = 0; i < l.n; ++i) {
          const T* p = px + (i * l.c + ch) * l.inner;
          for (int64_t j = 0; j < l.inner; ++j) v += (p[j] - mean) * (p[j] - mean);
        }
        pm[ch] = mean;
        pv[ch] = v / static_cast<double>(l.count());
      }
    });
  });
  return r;
}

Tensor batch_norm_elemt(const Tensor& x_in, const Tensor& mean_in, const Tensor& invstd_in,
                        const Tensor& w_in, const Tensor& b_in) {
  const char* op = "batch_norm_elemt";
  const Layout l = layout_of(x_in, op);
  Tensor x = x_in.contiguous();
  Tensor mean = channel_vector(mean_in, l.c, op, "mean");
  Tensor invstd = channel_vector(invstd_in, l.c, op, "invstd");
  Tensor w = channel_vector(w_in, l.c, op, "weight", true);
  Tensor b = channel_vector(b_in, l.c, op, "bias", true);
  Tensor out = Tensor::empty(x.sizes(), x.dtype());
  if (x.numel() == 0) return out;
  const double* pm = mean.data_ptr<double>();
  const double* ps = invstd.data_ptr<double>();
  const double* pw = w.defined() ? w.data_ptr<double>() : nullptr;
  const double* pb = b.defined() ? b.data_ptr<double>() : nullptr;
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    T* po = out.data_ptr<T>();
    parallel_for(0, l.n * l.c, plane_grain(l.inner), [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) {
        const int64_t ch = plane % l.c;
        const double scale = ps[ch] * (pw ? pw[ch] : 1.0);
        const double shift = (pb ? pb[ch] : 0.0) - pm[ch] * scale;
        const T* xi = px + plane * l.inner;
        T* o = po + plane * l.inner;
        for (int64_t j = 0; j < l.inner; ++j) o[j] = static_cast<T>(xi[j] * scale + shift);
      }
    });
  });
  return out;
}

BatchNormGradSums batch_norm_backward_reduce(const Tensor& grad_in, const Tensor& x_in,
                                             const Tensor& mean_in, const Tensor& invstd_in) {
  const char* op = "batch_norm_backward_reduce";
  const Layout l = layout_of(x_in, op);
  COHORT_CHECK(grad_in.defined() && grad_in.sizes() == x_in.sizes(),
               "{}: grad must have the input's shape {}, got {}", op, shape_str(x_in.sizes()),
               grad_in.defined() ? shape_str(grad_in.sizes()) : std::string("undefined"));
  Tensor x = x_in.contiguous(), g = grad_in.to(x_in.dtype()).contiguous();
  Tensor mean = channel_vector(mean_in, l.c, op, "mean");
  Tensor invstd = channel_vector(invstd_in, l.c, op, "invstd");
  BatchNormGradSums r{Tensor::zeros({l.c}, kFloat64), Tensor::zeros({l.c}, kFloat64)};
  if (x.numel() == 0) return r;
  const double* pm = mean.data_ptr<double>();
  const double* ps = invstd.data_ptr<double>();
  double* psg = r.sum_dy.data_ptr<double>();
  double* psgx = r.sum_dy_xhat.data_ptr<double>();
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    parallel_for(0, l.c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < l.n; ++i) {
          const T* xp = px + (i * l.c + ch) * l.inner;
          const T* gp = pg + (i * l.c + ch) * l.inner;
          for (int64_t j = 0; j < l.inner; ++j) {
            sg += gp[j];
            sgx += gp[j] * (xp[j] - pm[ch]);
          }
        }
        psg[ch] = sg;
        psgx[ch] = sgx * ps[ch];
      }
    });
  });
  return r;
}

Tensor batch_norm_backward_elemt(const Tensor& grad_in, const Tensor& x_in, const Tensor& mean_in,
                                 const Tensor& invstd_in, const Tensor& w_in,
                                 const Tensor& sum_dy_in, const Tensor& sum_dy_xhat_in,
                                 int64_t count) {
  const char* op = "batch_norm_backward_elemt";
  const Layout l = layout_of(x_in, op);
  COHORT_CHECK(grad_in.defined() && grad_in.sizes() == x_in.sizes(),
               "{}: grad must have the input's shape {}, got {}", op, shape_str(x_in.sizes()),
               grad_in.defined() ? shape_str(grad_in.sizes()) : std::string("undefined"));
  COHORT_CHECK(count > 0, "{}: count must be positive, got {}", op, count);
  Tensor x = x_in.contiguous(), g = grad_in.to(x_in.dtype()).contiguous();
  Tensor mean = channel_vector(mean_in, l.c, op, "mean");
  Tensor invstd = channel_vector(invstd_in, l.c, op, "invstd");
  Tensor w = channel_vector(w_in, l.c, op, "weight", true);
  Tensor sum_dy = channel_vector(sum_dy_in, l.c, op, "sum_dy");
  Tensor sum_dy_xhat = channel_vector(sum_dy_xhat_in, l.c, op, "sum_dy_xhat");
  Tensor dx = Tensor::empty(x.sizes(), x.dtype());
  if (x.numel() == 0) return dx;
  const double* pm = mean.data_ptr<double>();
  const double* ps = invstd.data_ptr<double>();
  const double* pw = w.defined() ? w.data_ptr<double>() : nullptr;
  const double* psg = sum_dy.data_ptr<double>();
  const double* psgx = sum_dy_xhat.data_ptr<double>();
  const double n = static_cast<double>(count);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    T* pd = dx.data_ptr<T>();
    parallel_for(0, l.n * l.c, plane_grain(l.inner), [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) {
        const int64_t ch = plane % l.c;
        const double s = ps[ch], k = (pw ? pw[ch] : 1.0) * s;
        const double mg = psg[ch] / n, mgx = psgx[ch] / n;
        const T* xp = px + plane * l.inner;
        const T* gp = pg + plane * l.inner;
        T* d = pd + plane * l.inner;
        for (int64_t j = 0; j < l.inner; ++j) {
          const double xhat = (xp[j] - pm[ch]) * s;
          d[j] = static_cast<T>(k * (gp[j] - mg - xhat * mgx));
        }
      }
    });
  });
  return dx;
}

}  // namespace cohort::native
