#include "cohort/core/native/loss.h"

#include <limits>

#include "cohort/core/dispatch.h"
#include "cohort/core/native/class_rows.h"

namespace cohort::native {
DeviceOp<Tensor(const Tensor&, const Tensor&, Reduction, int64_t)> nll_loss_device("nll_loss");
DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&, Reduction, int64_t)>
    nll_loss_backward_device("nll_loss_backward");

Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  if (Device d = op_device("nll_loss", {&input, &target}); !d.is_cpu())
    return nll_loss_device(d, input, target, reduction, ignore_index);
  ClassRows s = class_rows(input, target, "nll_loss", "input");
  const int64_t* t = s.target.data_ptr<int64_t>();
  return dispatch_floating(input.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* x = s.scores.data_ptr<T>();
    Tensor per = Tensor::empty({s.n}, input.dtype());
    T* p = per.data_ptr<T>();
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < s.n; ++i) {
      if (t[i] == ignore_index) {
        p[i] = T(0);
        continue;
      }
      COHORT_CHECK(t[i] >= 0 && t[i] < s.c, "nll_loss: target {} out of range [0, {}) at row {}",
                   t[i], s.c, i);
      p[i] = -x[i * s.c + t[i]];
      total += p[i];
      ++count;
    }
    switch (reduction) {
      case Reduction::kNone:
        return input.dim() == 1 ? per.reshape({}) : per;
      case Reduction::kSum:
        return Tensor::scalar(total, input.dtype());
      case Reduction::kMean:
      default:
        return Tensor::scalar(
            count ? total / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN(),
            input.dtype());
    }
  });
}

Tensor nll_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction, int64_t ignore_index) {
  if (Device d = op_device("nll_loss_backward", {&grad, &input, &target}); !d.is_cpu())
    return nll_loss_backward_device(d, grad, input, target, reduction, ignore_index);
  ClassRows s = class_rows(input, target, "nll_loss_backward", "input");
  const int64_t* t = s.target.data_ptr<int64_t>();
  Tensor dx = Tensor::zeros({s.n, s.c}, input.dtype());
  dispatch_floating(input.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    T* d = dx.data_ptr<T>();
    int64_t count = 0;
    for (int64_t i = 0; i < s.n; ++i) count += t[i] != ignore_index;
    Tensor gc = grad.to(input.dtype()).contiguous();
    const T* g = gc.data_ptr<T>();
    for (int64_t i = 0; i < s.n; ++i) {
      if (t[i] == ignore_index) continue;
      T gi;
      if (reduction == Reduction::kNone)
        gi = g[i];
      else if (reduction == Reduction::kSum)
        gi = g[0];
      else
        gi = g[0] / static_cast<T>(count);
      d[i * s.c + t[i]] = -gi;
    }
  });
  return input.dim() == 1 ? dx.reshape({s.c}) : dx;
}

}  // namespace cohort::native
