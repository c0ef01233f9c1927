#include "cohort/optim/sgd.h"

#include <functional>
#include <type_traits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/core/native/fused_optim.h"
#include "cohort/optim/device_update.h"
#include "cohort/optim/update_kernels.h"
#include "cohort/optim/update_util.h"

namespace cohort::optim {

namespace {

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first;
};

template <typename T>
SgdCoeffs<T> coeffs(const SgdStep& s) {
  return {static_cast<T>(s.lr),
          static_cast<T>(s.momentum),
          static_cast<T>(1.0 - s.dampening),
          static_cast<T>(s.weight_decay),
          s.maximize ? T(-1) : T(1),
          s.weight_decay != 0,
          s.momentum != 0,
          s.first,
          s.nesterov};
}

// The update of elements [b, e) of one parameter: float32 through the kernel
// path's loop (update_kernels.h), float64 through the reference loop.
template <typename T>
std::function<void(int64_t, int64_t)> sgd_kernel(T* p, const T* g, T* buf, const SgdStep& s) {
  const SgdCoeffs<T> c = coeffs<T>(s);
  auto loop = [] {
    if constexpr (std::is_same_v<T, float>)
      return update_kernels().sgd;
    else
      return static_cast<void (*)(T*, const T*, T*, int64_t, const SgdCoeffs<T>&)>(&sgd_reference);
  }();
  return [=](int64_t b, int64_t e) {
    loop(p + b, g + b, buf != nullptr ? buf + b : nullptr, e - b, c);
  };
}

}  // namespace

namespace {

Options to_options(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer("SGD", to_options(o)) {
  add_param_group(std::move(params));
}

void SGD::add_param_group(std::vector<Tensor> params, const SGDOptions& options) {
  Optimizer::add_param_group(std::move(params), to_options(options));
}

void SGD::check_options(const Options& options) const {
  ParamGroup g;
  g.options = options;
  COHORT_CHECK(g.option("lr") >= 0, "SGD: invalid learning rate {}", g.option("lr"));
  COHORT_CHECK(g.option("momentum") >= 0, "SGD: invalid momentum {}", g.option("momentum"));
  COHORT_CHECK(g.option("weight_decay") >= 0, "SGD: invalid weight_decay {}",
               g.option("weight_decay"));
  COHORT_CHECK(
      g.option("nesterov") == 0 || (g.option("momentum") > 0 && g.option("dampening") == 0),
      "SGD: nesterov momentum requires a momentum and zero dampening, got momentum {} "
      "and dampening {}",
      g.option("momentum"), g.option("dampening"));
}

std::vector<std::string> SGD::state_keys(const ParamGroup&) const { return {"momentum_buffer"}; }

void SGD::step() {
  NoGradGuard no_grad;
  std::vector<DenseUpdate> updates;
  UpdateBatch batch;
  for (size_t gi = 0; gi < num_param_groups(); ++gi) {
    const ParamGroup& group = param_groups()[gi];
    SgdStep s{group.option("lr"),
              group.option("momentum"),
              group.option("dampening"),
              group.option("weight_decay"),
              group.option("nesterov") != 0,
              group.option("maximize") != 0,
              false};
    size_t offset = group_offset(gi);
    // Parameters on a device: one fused multi-tensor step for the group.
    DeviceUpdates on_device("SGD");
    for (size_t j = 0; j < group.params.size(); ++j) {
      const Tensor& p = group.params[j];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      TensorDict& st = state(offset + j);
      Tensor buf;
      if (s.momentum != 0) {
        s.first = !st.contains("momentum_buffer");
        if (s.first) st.insert("momentum_buffer", Tensor::empty(p.sizes(), p.dtype(), p.device()));
        buf = state_on(st, "momentum_buffer", p);
      }
      if (!p.is_cpu()) {
        on_device.add(p, grad, {buf}, s.first ? 1 : 0);
        continue;
      }
      const DenseUpdate& u = updates.emplace_back(p, grad, "SGD");
      if (p.dtype() == kFloat64)
        batch.add(p.numel(), sgd_kernel(u.param<double>(), u.grad<double>(),
                                        buf.defined() ? buf.data_ptr<double>() : nullptr, s));
      else
        batch.add(p.numel(), sgd_kernel(u.param<float>(), u.grad<float>(),
                                        buf.defined() ? buf.data_ptr<float>() : nullptr, s));
    }
    if (!on_device.empty()) {
      native::SgdStep d{s.lr, s.momentum, s.dampening, s.weight_decay, s.nesterov, s.maximize};
      for (const DeviceUpdates& u : on_device.by_device()) {
        const std::vector<uint8_t> first(u.extras().begin(), u.extras().end());
        native::sgd_step(u.params(), u.grads(), u.state(0), first, d);
        u.finish();
      }
    }
  }
  batch.run();
  for (DenseUpdate& u : updates) u.finish();
}

}  // namespace cohort::optim
