#include "cohort/autograd/gradcheck.h"

#include <cmath>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/dispatch.h"

namespace cohort::autograd {
namespace {

// Deterministic weights in [0.5, 1.5) with alternating sign (splitmix64).
Tensor projection(const Shape& sizes, DType dt, uint64_t seed) {
  int64_t n = shape_numel(sizes);
  std::vector<double> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 12345;
  for (int64_t i = 0; i < n; ++i) {
    s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    double u = static_cast<double>(z >> 11) / 9007199254740992.0;
    v[i] = (0.5 + u) * ((i % 2) ? -1.0 : 1.0);
  }
  return Tensor::from_vector(v, sizes).to(dt);
}

double eval(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& r) {
  NoGradGuard ng;
  Tensor out = fn(inputs);
  return sum(mul(to(out, DType::kFloat64), r)).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  GradcheckResult res;
  // Analytical: one backward of L.
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) t.mutable_grad() = Tensor();
  Tensor out;
  {
    EnableGradGuard eg;
    out = fn(inputs);
  }
  Tensor r = projection(out.sizes(), DType::kFloat64, opt.seed);
  {
    EnableGradGuard eg;
    Tensor loss = sum(mul(to(out, DType::kFloat64), r));
    COHORT_CHECK(loss.requires_grad(), "gradcheck: the function's output does not require grad");
    loss.backward();
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    COHORT_CHECK(x.is_contiguous(), "gradcheck: input {} must be contiguous", k);
    Tensor g = x.grad();
    std::vector<double> analytical =
        g.defined() ? g.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    dispatch_floating(x.dtype(), "gradcheck", [&](auto tag) {
      using T = decltype(tag);
      T* p = x.data_ptr<T>();
      for (int64_t i = 0; i < x.numel() && res.ok; ++i) {
        T orig = p[i];
        p[i] = static_cast<T>(orig + opt.eps);
        double hi = static_cast<double>(p[i]);
        double fp = eval(fn, inputs, r);
        p[i] = static_cast<T>(orig - opt.eps);
        double lo = static_cast<double>(p[i]);
        double fm = eval(fn, inputs, r);
        p[i] = orig;
        double numerical = (fp - fm) / (hi - lo);
        double a = analytical[i];
        if (!(std::abs(a - numerical) <= opt.atol + opt.rtol * std::abs(numerical))) {
          res.ok = false;
          res.message = fmt::format(
              "gradcheck: input {} (shape {}) element {}: analytical {} vs numerical {}", k,
              shape_str(x.sizes()), i, a, numerical);
        }
      }
    });
    if (!res.ok) break;
  }
  return res;
}

}  // namespace cohort::autograd
