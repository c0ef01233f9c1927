#include "cohort/optim/adam.h"

#include <cmath>
#include <functional>
#include <type_traits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/core/native/fused_optim.h"
#include "cohort/optim/device_update.h"
#include "cohort/optim/update_kernels.h"
#include "cohort/optim/update_util.h"

namespace cohort::optim {

namespace {

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
  double step;
};

// The update of elements [b, e) of one parameter: float32 through the kernel
// path's loop (update_kernels.h), float64 through the reference loop.
template <typename T>
std::function<void(int64_t, int64_t)> adam_kernel(T* p, const T* g, T* m, T* v, T* vmax,
                                                  const AdamStep& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, s.step);
  const double bc2 = 1.0 - std::pow(s.beta2, s.step);
  AdamCoeffs<T> c;
  c.sign = s.maximize ? T(-1) : T(1);
  c.weight_decay = static_cast<T>(s.weight_decay);
  c.decay_factor = static_cast<T>(1.0 - s.lr * s.weight_decay);
  c.beta1 = static_cast<T>(s.beta1);
  c.beta2 = static_cast<T>(s.beta2);
  c.one_beta1 = static_cast<T>(1.0 - s.beta1);
  c.one_beta2 = static_cast<T>(1.0 - s.beta2);
  c.bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  c.eps = static_cast<T>(s.eps);
  c.neg_step_size = static_cast<T>(-(s.lr / bc1));
  c.decay = s.weight_decay == 0 ? 0 : s.decoupled ? 2 : 1;
  auto loop = [] {
    if constexpr (std::is_same_v<T, float>)
      return update_kernels().adam;
    else
      return static_cast<void (*)(T*, const T*, T*, T*, T*, int64_t, const AdamCoeffs<T>&)>(
          &adam_reference);
  }();
  return [=](int64_t b, int64_t e) {
    loop(p + b, g + b, m + b, v + b, vmax != nullptr ? vmax + b : nullptr, e - b, c);
  };
}

}  // namespace

namespace {

Options to_options(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

AdamOptions to_adam(const AdamWOptions& o) {
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, o.maximize};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

Adam::Adam(std::string name, std::vector<Tensor> params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(name), to_options(o)), decoupled_(decoupled) {
  Optimizer::add_param_group(std::move(params));
}

void Adam::add_param_group(std::vector<Tensor> params, const AdamOptions& options) {
  Optimizer::add_param_group(std::move(params), to_options(options));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam("AdamW", std::move(params), to_adam(options), true) {}

void AdamW::add_param_group(std::vector<Tensor> params, const AdamWOptions& options) {
  Optimizer::add_param_group(std::move(params), to_options(to_adam(options)));
}

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
  std::vector<DenseUpdate> updates;
  UpdateBatch batch;
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
    // Parameters on a device: one fused multi-tensor step for the group.
    DeviceUpdates on_device(name().c_str());
    for (size_t j = 0; j < group.params.size(); ++j) {
      const Tensor& p = group.params[j];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      TensorDict& st = state(offset + j);
      if (!st.contains("step")) {
        // The step count stays on the CPU (the bias corrections are host math).
        st.insert("step", Tensor::scalar(0.0, kFloat32));
        st.insert("exp_avg", Tensor::zeros(p.sizes(), p.dtype(), p.device()));
        st.insert("exp_avg_sq", Tensor::zeros(p.sizes(), p.dtype(), p.device()));
      }
      if (s.amsgrad && !st.contains("max_exp_avg_sq"))
        st.insert("max_exp_avg_sq", Tensor::zeros(p.sizes(), p.dtype(), p.device()));
      float& step = *st.at("step").data_ptr<float>();
      step += 1.0f;
      s.step = step;
      Tensor m = state_on(st, "exp_avg", p), v = state_on(st, "exp_avg_sq", p);
      Tensor vmax = s.amsgrad ? state_on(st, "max_exp_avg_sq", p) : Tensor();
      if (!p.is_cpu()) {
        on_device.add(p, grad, {m, v, vmax}, s.step);
        continue;
      }
      const DenseUpdate& u = updates.emplace_back(p, grad, name().c_str());
      if (p.dtype() == kFloat64)
        batch.add(p.numel(), adam_kernel(u.param<double>(), u.grad<double>(), m.data_ptr<double>(),
                                         v.data_ptr<double>(),
                                         vmax.defined() ? vmax.data_ptr<double>() : nullptr, s));
      else
        batch.add(p.numel(), adam_kernel(u.param<float>(), u.grad<float>(), m.data_ptr<float>(),
                                         v.data_ptr<float>(),
                                         vmax.defined() ? vmax.data_ptr<float>() : nullptr, s));
    }
    if (!on_device.empty()) {
      native::AdamStep d{s.lr,           s.beta1,   s.beta2,    s.eps,
                         s.weight_decay, s.amsgrad, s.maximize, decoupled_};
      for (const DeviceUpdates& u : on_device.by_device()) {
        native::adam_step(u.params(), u.grads(), u.state(0), u.state(1), u.state(2), u.extras(), d);
        u.finish();
      }
    }
  }
  batch.run();
  for (DenseUpdate& u : updates) u.finish();
}

}  // namespace cohort::optim
