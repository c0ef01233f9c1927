#include "cohort/optim/sgd.h"

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/parallel.h"
#include "cohort/optim/update_util.h"

namespace cohort::optim {

namespace {

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first;
};

template <typename T>
void sgd_kernel(T* p, const T* g, T* buf, int64_t n, const SgdStep& s) {
  const T lr = static_cast<T>(s.lr), mom = static_cast<T>(s.momentum);
  const T damp1 = static_cast<T>(1.0 - s.dampening), wd = static_cast<T>(s.weight_decay);
  const T sign = s.maximize ? T(-1) : T(1);
  const bool has_wd = s.weight_decay != 0, has_mom = s.momentum != 0;
  parallel_for(0, n, kUpdateGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T d = sign * g[i];
      if (has_wd) d = d + wd * p[i];
      if (has_mom) {
        T m = s.first ? d : buf[i] * mom + damp1 * d;
        buf[i] = m;
        d = s.nesterov ? d + mom * m : m;
      }
      p[i] = p[i] - lr * d;
    }
  });
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o)
    : Optimizer("SGD", {{"lr", o.lr},
                        {"momentum", o.momentum},
                        {"dampening", o.dampening},
                        {"weight_decay", o.weight_decay},
                        {"nesterov", o.nesterov ? 1.0 : 0.0},
                        {"maximize", o.maximize ? 1.0 : 0.0}}) {
  add_param_group(std::move(params));
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
    for (size_t j = 0; j < group.params.size(); ++j) {
      const Tensor& p = group.params[j];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      TensorDict& st = state(offset + j);
      Tensor buf;
      if (s.momentum != 0) {
        s.first = !st.contains("momentum_buffer");
        if (s.first) st.insert("momentum_buffer", Tensor::empty(p.sizes(), p.dtype()));
        buf = st.at("momentum_buffer");
      }
      DenseUpdate u(p, grad, "SGD");
      if (p.dtype() == kFloat64)
        sgd_kernel(u.param<double>(), u.grad<double>(),
                   buf.defined() ? buf.data_ptr<double>() : nullptr, p.numel(), s);
      else
        sgd_kernel(u.param<float>(), u.grad<float>(),
                   buf.defined() ? buf.data_ptr<float>() : nullptr, p.numel(), s);
      u.finish();
    }
  }
}

}  // namespace cohort::optim
