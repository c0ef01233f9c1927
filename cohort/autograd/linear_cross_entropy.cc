#include "cohort/autograd/linear_cross_entropy.h"

#include <algorithm>
#include <limits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/kernels/cross_entropy.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/linalg.h"

namespace cohort {

Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& target,
                            int64_t ignore_index, int64_t chunk_rows) {
  COHORT_CHECK(x.defined() && x.dim() == 2, "linear_cross_entropy: x must be [N, C], got {}",
               x.defined() ? shape_str(x.sizes()) : "undefined");
  COHORT_CHECK(w.defined() && w.dim() == 2 && w.size(1) == x.size(1),
               "linear_cross_entropy: w must be [V, {}] for x {}, got {}", x.size(1),
               shape_str(x.sizes()), w.defined() ? shape_str(w.sizes()) : "undefined");
  COHORT_CHECK(target.defined() && target.dtype() == kInt64 && target.dim() == 1 &&
                   target.size(0) == x.size(0),
               "linear_cross_entropy: target must be int64 [{}], got {}", x.size(0),
               target.defined()
                   ? fmt::format("{} {}", dtype_name(target.dtype()), shape_str(target.sizes()))
                   : std::string("undefined"));
  if (x.dtype() != kFloat32 || w.dtype() != kFloat32 || !x.is_cpu() || !w.is_cpu() ||
      bf16_operands({x, w}))
    return cross_entropy(linear(x, w), target, Reduction::kMean, ignore_index);

  const int64_t n = x.size(0), c = x.size(1), v = w.size(0);
  const Tensor t = target.contiguous();
  int64_t count = 0;
  {
    const int64_t* p = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) count += p[i] != ignore_index;
  }
  const bool need_grad = autograd::any_requires_grad({x, w});
  const bool need_x = need_grad && x.requires_grad(), need_w = need_grad && w.requires_grad();
  const int64_t rows = chunk_rows > 0
                           ? chunk_rows
                           : std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(v, 1));
  Tensor gx, gw;
  double total = 0;
  {
    NoGradGuard no_grad;  // the chunks' work is not recorded
    const Tensor xc = x.contiguous(), wc = w.contiguous();
    if (need_x) gx = Tensor::empty({n, c}, kFloat32);
    if (need_w) gw = Tensor::zeros({v, c}, kFloat32);
    // Each row's share of the mean, so that dlogits come out final.
    const Tensor inv_count = Tensor::full(
        {}, count > 0 ? 1.0 / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN(),
        kFloat32);
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t len = std::min(rows, n - r0);
      const Tensor xk = xc.narrow(0, r0, len), tk = t.narrow(0, r0, len);
      Tensor logits = native::linear(xk, wc, Tensor());  // [len, V]
      kernels::CrossEntropyResult ce =
          kernels::cross_entropy(logits, tk, Reduction::kSum, ignore_index);
      total += ce.loss.item<double>();
      if (!need_grad) continue;
      Tensor d = kernels::cross_entropy_backward(inv_count, logits, tk, ce.lse, Reduction::kSum,
                                                 ignore_index);
      logits = Tensor();
      const float* pd = d.data_ptr<float>();
      if (need_x)
        native::gemm(false, false, len, c, v, 1.0f, pd, v, wc.data_ptr<float>(), c, 0.0f,
                     gx.data_ptr<float>() + r0 * c, c);
      if (need_w)
        native::gemm(true, false, v, c, len, 1.0f, pd, v, xk.data_ptr<float>(), c, 1.0f,
                     gw.data_ptr<float>(), c);
    }
  }
  Tensor out = Tensor::full(
      {}, count > 0 ? total / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN(),
      kFloat32);
  if (!need_grad) return out;
  return autograd::record(
      out, "linear_cross_entropy", {x, w},
      [gx, gw](const Tensor& g, const std::vector<bool>& needs) {
        auto scaled = [&](const Tensor& full) {
          const double s = g.item<double>();
          return s == 1.0 ? full : native::binary_scalar(native::BinaryOp::kMul, full, s);
        };
        return std::vector<Tensor>{needs[0] && gx.defined() ? scaled(gx) : Tensor(),
                                   needs[1] && gw.defined() ? scaled(gw) : Tensor()};
      });
}

}  // namespace cohort
