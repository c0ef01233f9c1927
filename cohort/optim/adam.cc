#include "cohort/optim/adam.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/parallel.h"
#include "cohort/optim/update_util.h"

namespace cohort::optim {

namespace {

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
  double step;
};

// kAmsgrad and the weight-decay flavour are compile-time so the loop has no
// branches and vectorizes (with -fno-math-errno for sqrt, see CMakeLists.txt).
template <typename T, bool kAmsgrad, int kDecay>  // kDecay: 0 none, 1 L2, 2 decoupled
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, int64_t b, int64_t e, T sign, T wd, T decay, T b1, T b2,
               T one_b1, T one_b2, T bc2_sqrt, T eps, T neg_step_size) {
  for (int64_t i = b; i < e; ++i) {
    T pi = p[i];
    T gi = sign * g[i];
    if constexpr (kDecay == 1) gi = gi + wd * pi;
    if constexpr (kDecay == 2) pi = pi * decay;
    T mi = m[i] * b1 + one_b1 * gi;
    T vi = v[i] * b2 + one_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kAmsgrad) {
      vi = std::max(vmax[i], vi);
      vmax[i] = vi;
    }
    T denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = pi + neg_step_size * (mi / denom);
  }
}

template <typename T>
void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStep& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, s.step);
  const double bc2 = 1.0 - std::pow(s.beta2, s.step);
  const T neg_step_size = static_cast<T>(-(s.lr / bc1));
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
  const T one_b1 = static_cast<T>(1.0 - s.beta1), one_b2 = static_cast<T>(1.0 - s.beta2);
  const T eps = static_cast<T>(s.eps), wd = static_cast<T>(s.weight_decay);
  const T decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
  const T sign = s.maximize ? T(-1) : T(1);
  const bool l2 = !s.decoupled && s.weight_decay != 0;
  const bool decoupled = s.decoupled && s.weight_decay != 0;
  const int kind = l2 ? 1 : decoupled ? 2 : 0;
  parallel_for(0, n, kUpdateGrain, [&](int64_t b, int64_t e) {
    auto run = [&](auto amsgrad, auto decay_kind) {
      adam_loop<T, decltype(amsgrad)::value, decltype(decay_kind)::value>(
          p, g, m, v, vmax, b, e, sign, wd, decay, b1, b2, one_b1, one_b2, bc2_sqrt, eps,
          neg_step_size);
    };
    using F = std::false_type;
    using Tr = std::true_type;
    using D0 = std::integral_constant<int, 0>;
    using D1 = std::integral_constant<int, 1>;
    using D2 = std::integral_constant<int, 2>;
    if (vmax != nullptr) {
      if (kind == 0)
        run(Tr{}, D0{});
      else if (kind == 1)
        run(Tr{}, D1{});
      else
        run(Tr{}, D2{});
    } else {
      if (kind == 0)
        run(F{}, D0{});
      else if (kind == 1)
        run(F{}, D1{});
      else
        run(F{}, D2{});
    }
  });
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

Adam::Adam(std::string name, std::vector<Tensor> params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(name), {{"lr", o.lr},
                                  {"beta1", o.beta1},
                                  {"beta2", o.beta2},
                                  {"eps", o.eps},
                                  {"weight_decay", o.weight_decay},
                                  {"amsgrad", o.amsgrad ? 1.0 : 0.0},
                                  {"maximize", o.maximize ? 1.0 : 0.0}}),
      decoupled_(decoupled) {
  add_param_group(std::move(params));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam("AdamW", std::move(params),
           AdamOptions{options.lr, options.beta1, options.beta2, options.eps, options.weight_decay,
                       options.amsgrad, options.maximize},
           true) {}

void Adam::check_options(const Options& options) const {
  ParamGroup g;
  g.options = options;
  COHORT_CHECK(g.option("lr") >= 0, "{}: invalid learning rate {}", name(), g.option("lr"));
  COHORT_CHECK(g.option("eps") >= 0, "{}: invalid epsilon {}", name(), g.option("eps"));
  COHORT_CHECK(g.option("beta1") >= 0 && g.option("beta1") < 1, "{}: invalid beta1 {}", name(),
               g.option("beta1"));
  COHORT_CHECK(g.option("beta2") >= 0 && g.option("beta2") < 1, "{}: invalid beta2 {}", name(),
               g.option("beta2"));
  COHORT_CHECK(g.option("weight_decay") >= 0, "{}: invalid weight_decay {}", name(),
               g.option("weight_decay"));
}

std::vector<std::string> Adam::state_keys(const ParamGroup&) const {
  return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
}

void Adam::step() {
  NoGradGuard no_grad;
  for (size_t gi = 0; gi < num_param_groups(); ++gi) {
    const ParamGroup& group = param_groups()[gi];
    AdamStep s{group.option("lr"),
               group.option("beta1"),
               group.option("beta2"),
               group.option("eps"),
               group.option("weight_decay"),
               group.option("amsgrad") != 0,
               group.option("maximize") != 0,
               decoupled_,
               0.0};
    size_t offset = group_offset(gi);
    for (size_t j = 0; j < group.params.size(); ++j) {
      const Tensor& p = group.params[j];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      TensorDict& st = state(offset + j);
      if (!st.contains("step")) {
        st.insert("step", Tensor::scalar(0.0, kFloat32));
        st.insert("exp_avg", Tensor::zeros(p.sizes(), p.dtype()));
        st.insert("exp_avg_sq", Tensor::zeros(p.sizes(), p.dtype()));
      }
      if (s.amsgrad && !st.contains("max_exp_avg_sq"))
        st.insert("max_exp_avg_sq", Tensor::zeros(p.sizes(), p.dtype()));
      float& step = *st.at("step").data_ptr<float>();
      step += 1.0f;
      s.step = step;
      Tensor m = st.at("exp_avg"), v = st.at("exp_avg_sq");
      Tensor vmax = s.amsgrad ? st.at("max_exp_avg_sq") : Tensor();
      DenseUpdate u(p, grad, name().c_str());
      if (p.dtype() == kFloat64)
        adam_kernel(u.param<double>(), u.grad<double>(), m.data_ptr<double>(), v.data_ptr<double>(),
                    vmax.defined() ? vmax.data_ptr<double>() : nullptr, p.numel(), s);
      else
        adam_kernel(u.param<float>(), u.grad<float>(), m.data_ptr<float>(), v.data_ptr<float>(),
                    vmax.defined() ? vmax.data_ptr<float>() : nullptr, p.numel(), s);
      u.finish();
    }
  }
}

}  // namespace cohort::optim
