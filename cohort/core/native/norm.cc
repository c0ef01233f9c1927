#include "cohort/core/native/norm.h"

#include <cmath>

#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"
#include "cohort/core/kernels/layer_norm.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::native {
namespace {

int64_t check_layer_norm(const Tensor& x, const Shape& ns, const Tensor& w, const Tensor& b) {
  const int64_t k = static_cast<int64_t>(ns.size());
  COHORT_CHECK(k >= 1 && x.dim() >= k, "layer_norm: normalized_shape {} does not fit input {}",
               shape_str(ns), shape_str(x.sizes()));
  for (int64_t i = 0; i < k; ++i)
    COHORT_CHECK(x.sizes()[x.dim() - k + i] == ns[i],
                 "layer_norm: input {} does not end with normalized_shape {}", shape_str(x.sizes()),
                 shape_str(ns));
  if (w.defined())
    COHORT_CHECK(w.sizes() == ns, "layer_norm: weight {} must have shape {}", shape_str(w.sizes()),
                 shape_str(ns));
  if (b.defined())
    COHORT_CHECK(b.sizes() == ns, "layer_norm: bias {} must have shape {}", shape_str(b.sizes()),
                 shape_str(ns));
  return shape_numel(ns);
}

}  // namespace

DeviceOp<LayerNormResult(const Tensor&, const Shape&, const Tensor&, const Tensor&, double, bool)>
    layer_norm_device("layer_norm");
DeviceOp<LayerNormGrads(const Tensor&, const Tensor&, const Shape&, const Tensor&, const Tensor&,
                        const Tensor&, bool, bool, bool)>
    layer_norm_backward_device("layer_norm_backward");
DeviceOp<AddLayerNormResult(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                            bool)>
    add_layer_norm_device("add_layer_norm");

LayerNormResult layer_norm(const Tensor& x_in, const Shape& ns, const Tensor& w_in,
                           const Tensor& b_in, double eps, bool bf16_twin) {
  const int64_t n = check_layer_norm(x_in, ns, w_in, b_in);
  if (Device d = op_device("layer_norm", {&x_in, &w_in, &b_in}); !d.is_cpu())
    return layer_norm_device(d, x_in, ns, w_in, b_in, eps, bf16_twin);
  Tensor x = x_in.contiguous();
  const int64_t rows = n ? x.numel() / n : 0;
  LayerNormResult r{Tensor::empty(x.sizes(), x.dtype()), Tensor::empty({rows}, kFloat64),
                    Tensor::empty({rows}, kFloat64)};
  if (x.dtype() == kFloat32) {
    Tensor w = w_in.defined() ? w_in.to(kFloat32).contiguous() : Tensor();
    Tensor b = b_in.defined() ? b_in.to(kFloat32).contiguous() : Tensor();
    Tensor out16 = bf16_twin ? Tensor::empty(x.sizes(), kBFloat16) : Tensor();
    kernels::layer_norm_rows(x.data_ptr<float>(), nullptr, nullptr,
                             w.defined() ? w.data_ptr<float>() : nullptr,
                             b.defined() ? b.data_ptr<float>() : nullptr, r.out.data_ptr<float>(),
                             r.mean.data_ptr<double>(), r.rstd.data_ptr<double>(), rows, n, eps,
                             bf16_twin ? out16.data_ptr<BFloat16>() : nullptr);
    if (bf16_twin) set_bf16_twin(r.out, out16);
    return r;
  }
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    Tensor w = w_in.defined() ? w_in.to(x.dtype()).contiguous() : Tensor();
    Tensor b = b_in.defined() ? b_in.to(x.dtype()).contiguous() : Tensor();
    const T* px = x.data_ptr<T>();
    const T* pw = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* pb = b.defined() ? b.data_ptr<T>() : nullptr;
    T* po = r.out.data_ptr<T>();
    double* pm = r.mean.data_ptr<double>();
    double* ps = r.rstd.data_ptr<double>();
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t row = r0; row < r1; ++row) {
                     const T* xr = px + row * n;
                     double s = 0;
                     for (int64_t i = 0; i < n; ++i) s += xr[i];
                     double mean = s / n, v = 0;
                     for (int64_t i = 0; i < n; ++i) v += (xr[i] - mean) * (xr[i] - mean);
                     double rstd = 1.0 / std::sqrt(v / n + eps);
                     pm[row] = mean;
                     ps[row] = rstd;
                     T* o = po + row * n;
                     for (int64_t i = 0; i < n; ++i) {
                       double y = (xr[i] - mean) * rstd;
                       if (pw) y *= pw[i];
                       if (pb) y += pb[i];
                       o[i] = static_cast<T>(y);
                     }
                   }
                 });
  });
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& grad_in, const Tensor& x_in, const Shape& ns,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& w_in,
                                   bool need_dx, bool need_dw, bool need_db) {
  if (Device d = op_device("layer_norm_backward", {&grad_in, &x_in, &mean, &rstd, &w_in});
      !d.is_cpu())
    return layer_norm_backward_device(d, grad_in, x_in, ns, mean, rstd, w_in, need_dx, need_dw,
                                      need_db);
  const int64_t n = shape_numel(ns);
  Tensor x = x_in.contiguous(), g = grad_in.contiguous();
  const int64_t rows = n ? x.numel() / n : 0;
  LayerNormGrads out;
  if (x.dtype() == kFloat32) {
    Tensor w = w_in.defined() ? w_in.to(kFloat32).contiguous() : Tensor();
    Tensor gf = g.to(kFloat32).contiguous();
    if (need_dx) out.dx = Tensor::empty(x.sizes(), kFloat32);
    if (need_dw) out.dweight = Tensor::empty(ns, kFloat32);
    if (need_db) out.dbias = Tensor::empty(ns, kFloat32);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
    kernels::layer_norm_backward_rows(gf.data_ptr<float>(), x.data_ptr<float>(), ptr(w),
                                      mean.data_ptr<double>(), rstd.data_ptr<double>(), ptr(out.dx),
                                      ptr(out.dweight), ptr(out.dbias), rows, n);
    return out;
  }
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor w = w_in.defined() ? w_in.to(x.dtype()).contiguous() : Tensor();
    const T* px = x.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    const T* pw = w.defined() ? w.data_ptr<T>() : nullptr;
    const double* pm = mean.data_ptr<double>();
    const double* ps = rstd.data_ptr<double>();
    if (need_dx) {
      out.dx = Tensor::empty(x.sizes(), x.dtype());
      T* pd = out.dx.data_ptr<T>();
      parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t row = r0; row < r1; ++row) {
                       const T* xr = px + row * n;
                       const T* gr = pg + row * n;
                       double m = pm[row], s = ps[row];
                       double sum_dy = 0, sum_dy_xhat = 0;
                       for (int64_t i = 0; i < n; ++i) {
                         double dy = pw ? gr[i] * static_cast<double>(pw[i]) : gr[i];
                         sum_dy += dy;
                         sum_dy_xhat += dy * (xr[i] - m) * s;
                       }
                       T* d = pd + row * n;
                       for (int64_t i = 0; i < n; ++i) {
                         double dy = pw ? gr[i] * static_cast<double>(pw[i]) : gr[i];
                         double xhat = (xr[i] - m) * s;
                         d[i] = static_cast<T>(s * (dy - sum_dy / n - xhat * sum_dy_xhat / n));
                       }
                     }
                   });
    }
    if (need_dw || need_db) {
      std::vector<double> dw(n, 0.0), db(n, 0.0);
      for (int64_t row = 0; row < rows; ++row) {
        const T* xr = px + row * n;
        const T* gr = pg + row * n;
        for (int64_t i = 0; i < n; ++i) {
          dw[i] += gr[i] * (xr[i] - pm[row]) * ps[row];
          db[i] += gr[i];
        }
      }
      if (need_dw) out.dweight = Tensor::from_vector(dw, ns).to(x.dtype());
      if (need_db) out.dbias = Tensor::from_vector(db, ns).to(x.dtype());
    }
  });
  return out;
}

AddLayerNormResult add_layer_norm(const Tensor& x_in, const Tensor& delta_in, const Tensor& w_in,
                                  const Tensor& b_in, double eps, bool bf16_twin) {
  COHORT_CHECK(x_in.dim() >= 1, "add_layer_norm: input must have a last dim to normalise, got {}",
               shape_str(x_in.sizes()));
  COHORT_CHECK(x_in.sizes() == delta_in.sizes() && x_in.dtype() == delta_in.dtype(),
               "add_layer_norm: x {} ({}) and delta {} ({}) must have one shape and dtype",
               shape_str(x_in.sizes()), dtype_name(x_in.dtype()), shape_str(delta_in.sizes()),
               dtype_name(delta_in.dtype()));
  const Shape ns{x_in.size(-1)};
  if (Device d = op_device("add_layer_norm", {&x_in, &delta_in, &w_in, &b_in}); !d.is_cpu()) {
    check_layer_norm(x_in, ns, w_in, b_in);
    return add_layer_norm_device(d, x_in, delta_in, w_in, b_in, eps, bf16_twin);
  }
  if (x_in.dtype() != kFloat32) {
    AddLayerNormResult r;
    r.sum = binary(BinaryOp::kAdd, x_in, delta_in);
    r.norm = layer_norm(r.sum, ns, w_in, b_in, eps);
    return r;
  }
  const int64_t n = check_layer_norm(x_in, ns, w_in, b_in);
  Tensor x = x_in.contiguous(), delta = delta_in.contiguous();
  const int64_t rows = n ? x.numel() / n : 0;
  AddLayerNormResult r{Tensor::empty(x.sizes(), kFloat32),
                       {Tensor::empty(x.sizes(), kFloat32), Tensor::empty({rows}, kFloat64),
                        Tensor::empty({rows}, kFloat64)}};
  Tensor w = w_in.defined() ? w_in.to(kFloat32).contiguous() : Tensor();
  Tensor b = b_in.defined() ? b_in.to(kFloat32).contiguous() : Tensor();
  Tensor out16 = bf16_twin ? Tensor::empty(x.sizes(), kBFloat16) : Tensor();
  kernels::layer_norm_rows(
      x.data_ptr<float>(), delta.data_ptr<float>(), r.sum.data_ptr<float>(),
      w.defined() ? w.data_ptr<float>() : nullptr, b.defined() ? b.data_ptr<float>() : nullptr,
      r.norm.out.data_ptr<float>(), r.norm.mean.data_ptr<double>(), r.norm.rstd.data_ptr<double>(),
      rows, n, eps, bf16_twin ? out16.data_ptr<BFloat16>() : nullptr);
  if (bf16_twin) set_bf16_twin(r.norm.out, out16);
  return r;
}

BatchNormResult batch_norm(const Tensor& x_in, const Tensor& rm, const Tensor& rv,
                           const Tensor& w_in, const Tensor& b_in, bool training, double momentum,
                           double eps) {
  COHORT_CHECK(x_in.dim() >= 2, "batch_norm: input must be [N, C, *], got {}",
               shape_str(x_in.sizes()));
  const int64_t nb = x_in.sizes()[0], c = x_in.sizes()[1];
  const int64_t inner = c ? x_in.numel() / (nb * c) : 0;  // spatial size
  const int64_t count = nb * inner;
  for (const Tensor* t : {&rm, &rv, &w_in, &b_in})
    if (t->defined())
      COHORT_CHECK(t->dim() == 1 && t->sizes()[0] == c,
                   "batch_norm: parameters and buffers must be [{}] for input {}, got {}", c,
                   shape_str(x_in.sizes()), shape_str(t->sizes()));
  if (!training)
    COHORT_CHECK(rm.defined() && rv.defined(),
                 "batch_norm: evaluation mode needs running_mean and running_var");
  if (training)
    COHORT_CHECK(count > 1,
                 "batch_norm: training needs more than one value per channel, got "
                 "input {}",
                 shape_str(x_in.sizes()));
  Tensor x = x_in.contiguous();
  BatchNormResult r{Tensor::empty(x.sizes(), x.dtype()), Tensor::empty({c}, kFloat64),
                    Tensor::empty({c}, kFloat64)};
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    Tensor w = w_in.defined() ? w_in.to(x.dtype()).contiguous() : Tensor();
    Tensor b = b_in.defined() ? b_in.to(x.dtype()).contiguous() : Tensor();
    const T* px = x.data_ptr<T>();
    T* po = r.out.data_ptr<T>();
    double* pm = r.mean.data_ptr<double>();
    double* ps = r.rstd.data_ptr<double>();
    std::vector<double> var_unbiased(c, 0.0);
    if (training) {
      parallel_for(0, c, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t ch = c0; ch < c1; ++ch) {
          double s = 0;
          for (int64_t i = 0; i < nb; ++i) {
            const T* p = px + (i * c + ch) * inner;
            for (int64_t j = 0; j < inner; ++j) s += p[j];
          }
          double mean = s / count, v = 0;
          for (int64_t i = 0; i < nb; ++i) {
            const T* p = px + (i * c + ch) * inner;
            for (int64_t j = 0; j < inner; ++j) v += (p[j] - mean) * (p[j] - mean);
          }
          pm[ch] = mean;
          ps[ch] = 1.0 / std::sqrt(v / count + eps);
          var_unbiased[ch] = v / (count - 1);
        }
      });
      if (rm.defined()) {
        Tensor upd = Tensor::from_vector(std::vector<double>(pm, pm + c));
        Tensor rm_mut = rm;  // a handle: updates the caller's buffer
        rm_mut.mul_(1.0 - momentum).add_(upd, momentum);
      }
      if (rv.defined()) {
        Tensor upd = Tensor::from_vector(var_unbiased);
        Tensor rv_mut = rv;
        rv_mut.mul_(1.0 - momentum).add_(upd, momentum);
      }
    } else {
      auto m = rm.to_vector<double>(), v = rv.to_vector<double>();
      for (int64_t ch = 0; ch < c; ++ch) {
        pm[ch] = m[ch];
        ps[ch] = 1.0 / std::sqrt(v[ch] + eps);
      }
    }
    const T* pw = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* pb = b.defined() ? b.data_ptr<T>() : nullptr;
    parallel_for(0, nb * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                 [&](int64_t p0, int64_t p1) {
                   for (int64_t plane = p0; plane < p1; ++plane) {
                     int64_t ch = plane % c;
                     T scale = static_cast<T>(ps[ch] * (pw ? static_cast<double>(pw[ch]) : 1.0));
                     T shift = static_cast<T>((pb ? static_cast<double>(pb[ch]) : 0.0) -
                                              pm[ch] * static_cast<double>(scale));
                     const T* xi = px + plane * inner;
                     T* o = po + plane * inner;
                     for (int64_t j = 0; j < inner; ++j) o[j] = xi[j] * scale + shift;
                   }
                 });
  });
  return r;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_in, const Tensor& x_in, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& w_in, bool training,
                                   bool need_dx, bool need_dw, bool need_db) {
  Tensor x = x_in.contiguous(), g = grad_in.contiguous();
  const int64_t nb = x.sizes()[0], c = x.sizes()[1];
  const int64_t inner = c ? x.numel() / (nb * c) : 0;
  const int64_t count = nb * inner;
  BatchNormGrads out;
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor w = w_in.defined() ? w_in.to(x.dtype()).contiguous() : Tensor();
    const T* px = x.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    const T* pw = w.defined() ? w.data_ptr<T>() : nullptr;
    const double* pm = mean.data_ptr<double>();
    const double* ps = rstd.data_ptr<double>();
    std::vector<double> sum_g(c, 0.0), sum_g_xhat(c, 0.0);
    parallel_for(0, c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < nb; ++i) {
          const T* xp = px + (i * c + ch) * inner;
          const T* gp = pg + (i * c + ch) * inner;
          for (int64_t j = 0; j < inner; ++j) {
            sg += gp[j];
            sgx += gp[j] * (xp[j] - pm[ch]) * ps[ch];
          }
        }
        sum_g[ch] = sg;
        sum_g_xhat[ch] = sgx;
      }
    });
    if (need_dw) out.dweight = Tensor::from_vector(sum_g_xhat).to(x.dtype());
    if (need_db) out.dbias = Tensor::from_vector(sum_g).to(x.dtype());
    if (need_dx) {
      out.dx = Tensor::empty(x.sizes(), x.dtype());
      T* pd = out.dx.data_ptr<T>();
      parallel_for(0, nb * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                   [&](int64_t p0, int64_t p1) {
                     for (int64_t plane = p0; plane < p1; ++plane) {
                       int64_t ch = plane % c;
                       double wv = pw ? static_cast<double>(pw[ch]) : 1.0;
                       double s = ps[ch];
                       const T* xp = px + plane * inner;
                       const T* gp = pg + plane * inner;
                       T* d = pd + plane * inner;
                       if (training) {
                         double mg = sum_g[ch] / count, mgx = sum_g_xhat[ch] / count;
                         for (int64_t j = 0; j < inner; ++j) {
                           double xhat = (xp[j] - pm[ch]) * s;
                           d[j] = static_cast<T>(wv * s * (gp[j] - mg - xhat * mgx));
                         }
                       } else {
                         T k = static_cast<T>(wv * s);
                         for (int64_t j = 0; j < inner; ++j) d[j] = gp[j] * k;
                       }
                     }
                   });
    }
  });
  return out;
}

}  // namespace cohort::native
