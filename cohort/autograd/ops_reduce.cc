// Sum and mean.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;

namespace {

// Gradient of a reduction: g (reduced shape) broadcast back to `in`, times scale.
Tensor expand_grad(const Tensor& g, const Shape& in, const std::vector<bool>& mask, double scale) {
  Shape keep = native::reduced_shape(in, mask, true);
  Tensor e = g.reshape(keep).expand(in).contiguous();
  if (scale != 1.0) e = e.clone().mul_(scale);  // clone: contiguous() may alias g
  return e;
}

Tensor reduce_op(const Tensor& x, const Shape& dims, bool keepdim, bool is_mean) {
  Tensor out = is_mean ? native::mean(x, dims, keepdim) : native::sum(x, dims, keepdim);
  if (!autograd::any_requires_grad({x})) return out;
  std::vector<bool> mask = native::reduce_mask(dims, x.dim(), "sum");
  Shape in = x.sizes();
  int64_t count = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (mask[i]) count *= in[i];
  double scale = is_mean ? 1.0 / static_cast<double>(count) : 1.0;
  return record(out, is_mean ? "mean" : "sum", {x}, [=](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{expand_grad(g, in, mask, scale)};
  });
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_op(x, {}, false, false); }
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  COHORT_CHECK(!dims.empty(), "sum: empty dims list; use sum(x) to reduce everything");
  return reduce_op(x, dims, keepdim, false);
}
Tensor mean(const Tensor& x) { return reduce_op(x, {}, false, true); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  COHORT_CHECK(!dims.empty(), "mean: empty dims list; use mean(x) to reduce everything");
  return reduce_op(x, dims, keepdim, true);
}

}  // namespace cohort
