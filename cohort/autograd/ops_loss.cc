// Softmax family and losses.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/softmax.h"

namespace cohort {

using autograd::record;

Tensor softmax(const Tensor& x, int64_t dim) {
  Tensor out = native::softmax(x, dim);
  if (!autograd::any_requires_grad({x})) return out;
  Tensor od = out.detach();
  return record(out, "softmax", {x},
                [od, dim](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{native::softmax_backward(g, od, dim)};
                },
                {od});
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  Tensor out = native::log_softmax(x, dim);
  if (!autograd::any_requires_grad({x})) return out;
  Tensor od = out.detach();
  return record(out, "log_softmax", {x},
                [od, dim](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{native::log_softmax_backward(g, od, dim)};
                },
                {od});
}

Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  Tensor out = native::nll_loss(input, target, reduction, ignore_index);
  if (!autograd::any_requires_grad({input})) return out;
  Tensor id = input.detach(), td = target.detach();
  return record(
      out, "nll_loss", {input},
      [=](const Tensor& g, const std::vector<bool>&) {
        return std::vector<Tensor>{native::nll_loss_backward(g, id, td, reduction, ignore_index)};
      },
      {id, td});
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  COHORT_CHECK(input.sizes() == target.sizes(), "mse_loss: input {} and target {} differ in shape",
               shape_str(input.sizes()), shape_str(target.sizes()));
  Tensor d = sub(input, target);
  Tensor sq = mul(d, d);
  switch (reduction) {
    case Reduction::kNone:
      return sq;
    case Reduction::kSum:
      return sum(sq);
    case Reduction::kMean:
    default:
      return mean(sq);
  }
}

}  // namespace cohort
