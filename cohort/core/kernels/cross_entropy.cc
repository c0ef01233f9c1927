#include "cohort/core/kernels/cross_entropy.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"
#include "cohort/core/kernels/transformer_rows.h"
#include "cohort/core/native/class_rows.h"

namespace cohort::kernels {
namespace {

// The [N, C] rows, their targets, and every target in range (or ignored).
native::ClassRows check_ce(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           const char* op) {
  native::ClassRows s = native::class_rows(logits, target, op, "logits");
  const int64_t* t = s.target.data_ptr<int64_t>();
  for (int64_t i = 0; i < s.n; ++i)
    COHORT_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < s.c),
                 "{}: target {} out of range [0, {}) at row {}", op, t[i], s.c, i);
  return s;
}

int64_t grain_rows(int64_t c) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(c, 1)); }

template <typename T>
T log_sum_exp(const T* x, int64_t c) {
  if constexpr (std::is_same_v<T, float>) {
    return detail::transformer_rows().log_sum_exp(x, c);
  } else {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < c; ++i) {
      if (std::isnan(x[i])) return x[i];
      mx = x[i] > mx ? x[i] : mx;
    }
    if (std::isinf(mx)) return mx;
    double s = 0;
    for (int64_t i = 0; i < c; ++i) s += std::exp(x[i] - mx);
    return mx + std::log(s);
  }
}

}  // namespace

DeviceOp<CrossEntropyResult(const Tensor&, const Tensor&, Reduction, int64_t)> cross_entropy_device(
    "cross_entropy");
DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Reduction, int64_t)>
    cross_entropy_backward_device("cross_entropy_backward");

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                                 int64_t ignore_index) {
  if (Device d = op_device("cross_entropy", {&logits, &target}); !d.is_cpu())
    return cross_entropy_device(d, logits, target, reduction, ignore_index);
  native::ClassRows s = check_ce(logits, target, ignore_index, "cross_entropy");
  const int64_t* t = s.target.data_ptr<int64_t>();
  CrossEntropyResult r;
  r.lse = Tensor::empty({s.n}, logits.dtype());
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    if (s.c == 0)
      COHORT_CHECK(s.n == 0, "cross_entropy: logits {} have no classes", shape_str(logits.sizes()));
    const T* x = s.scores.data_ptr<T>();
    T* lse = r.lse.data_ptr<T>();
    Tensor per = Tensor::empty({s.n}, logits.dtype());
    T* p = per.data_ptr<T>();
    parallel_for(0, s.n, grain_rows(s.c), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        if (t[i] == ignore_index) {
          lse[i] = T(0);
          p[i] = T(0);
          continue;
        }
        lse[i] = log_sum_exp<T>(x + i * s.c, s.c);
        p[i] = lse[i] - x[i * s.c + t[i]];
      }
    });
    if (reduction == Reduction::kNone) {
      r.loss = logits.dim() == 1 ? per.reshape({}) : per;
      return;
    }
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < s.n; ++i) {
      if (t[i] == ignore_index) continue;
      total += p[i];
      ++count;
    }
    if (reduction == Reduction::kSum)
      r.loss = Tensor::scalar(total, logits.dtype());
    else
      r.loss = Tensor::scalar(
          count ? total / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN(),
          logits.dtype());
  });
  return r;
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& lse_in, Reduction reduction, int64_t ignore_index) {
  if (Device d = op_device("cross_entropy_backward", {&grad, &logits, &target, &lse_in});
      !d.is_cpu())
    return cross_entropy_backward_device(d, grad, logits, target, lse_in, reduction, ignore_index);
  native::ClassRows s = check_ce(logits, target, ignore_index, "cross_entropy_backward");
  const int64_t* t = s.target.data_ptr<int64_t>();
  Tensor dx = Tensor::empty({s.n, s.c}, logits.dtype());
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    Tensor gc = grad.to(logits.dtype()).contiguous(), lc = lse_in.contiguous();
    const T* g = gc.data_ptr<T>();
    const T* lse = lc.data_ptr<T>();
    const T* x = s.scores.data_ptr<T>();
    T* d = dx.data_ptr<T>();
    int64_t count = 0;
    for (int64_t i = 0; i < s.n; ++i) count += t[i] != ignore_index;
    parallel_for(0, s.n, grain_rows(s.c), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        T* di = d + i * s.c;
        if (t[i] == ignore_index) {
          std::fill(di, di + s.c, T(0));
          continue;
        }
        T gi;
        if (reduction == Reduction::kNone)
          gi = g[i];
        else if (reduction == Reduction::kSum)
          gi = g[0];
        else
          gi = g[0] / static_cast<T>(count);
        const T* xi = x + i * s.c;
        if constexpr (std::is_same_v<T, float>)
          detail::transformer_rows().softmax_scaled(xi, lse[i], gi, di, s.c);
        else
          for (int64_t j = 0; j < s.c; ++j) di[j] = std::exp(xi[j] - lse[i]) * gi;
        di[t[i]] -= gi;
      }
    });
  });
  return logits.dim() == 1 ? dx.reshape({s.c}) : dx;
}

}  // namespace cohort::kernels
