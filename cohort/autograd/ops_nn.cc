// dropout, layer_norm, batch_norm, cross_entropy.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/kernels/cross_entropy.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/index.h"
#include "cohort/core/native/norm.h"
#include "cohort/core/random.h"

namespace cohort {

using autograd::record;

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  COHORT_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  native::DropoutResult r = native::dropout(x, p, gen);
  Tensor mask = r.mask;
  return record(r.out, "dropout", {x}, [mask](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{native::binary(native::BinaryOp::kMul, g, mask)};
  });
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator& gen) {
  COHORT_CHECK(p >= 0 && p <= 1, "dropout2d: p must be in [0, 1], got {}", p);
  COHORT_CHECK(x.dim() == 3 || x.dim() == 4,
               "dropout2d: input must be [N, C, H, W] or [C, H, W], got {}", shape_str(x.sizes()));
  COHORT_CHECK(is_floating(x.dtype()), "dropout2d: needs a floating tensor, got {}",
               dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  // One draw per channel plane, broadcast over H and W by mul (which records
  // the backward: the same mask times the incoming gradient).
  Shape plane = x.sizes();
  plane[plane.size() - 1] = plane[plane.size() - 2] = 1;
  // Drawn on the CPU from `gen` (the same planes on every device for a seed),
  // then moved to x's device: one value per plane, a small copy.
  Tensor keep =
      p == 1.0 ? Tensor::zeros(plane, x.dtype()) : bernoulli(plane, 1.0 - p, gen, x.dtype());
  if (p < 1.0) keep.mul_(1.0 / (1.0 - p));
  keep = keep.to(x.device());
  return mul(x, keep);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  // Under a bf16 policy the output's bf16 rounding comes with it, for the
  // bf16 GEMM that usually follows.
  native::LayerNormResult r =
      native::layer_norm(x, normalized_shape, weight, bias, eps, current_precision().is_bf16());
  if (!autograd::any_requires_grad({x, weight, bias})) return r.out;
  Tensor xd = x.detach(), wd = weight.defined() ? weight.detach() : Tensor();
  Tensor mean = r.mean, rstd = r.rstd;
  Shape ns = normalized_shape;
  return record(r.out, "layer_norm", {x, weight, bias},
                [=](const Tensor& g, const std::vector<bool>& needs) {
                  native::LayerNormGrads gr = native::layer_norm_backward(
                      g, xd, ns, mean, rstd, wd, needs[0], needs[1], needs[2]);
                  return std::vector<Tensor>{gr.dx.defined() ? gr.dx.view(xd.sizes()) : Tensor(),
                                             gr.dweight, gr.dbias};
                },
                {xd, wd});
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  native::BatchNormResult r =
      native::batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
  if (!autograd::any_requires_grad({x, weight, bias})) return r.out;
  Tensor xd = x.detach(), wd = weight.defined() ? weight.detach() : Tensor();
  Tensor mean = r.mean, rstd = r.rstd;
  return record(r.out, "batch_norm", {x, weight, bias},
                [=](const Tensor& g, const std::vector<bool>& needs) {
                  native::BatchNormGrads gr = native::batch_norm_backward(
                      g, xd, mean, rstd, wd, training, needs[0], needs[1], needs[2]);
                  return std::vector<Tensor>{gr.dx, gr.dweight, gr.dbias};
                },
                {xd, wd});
}

// One pass per row forward (log-sum-exp in chunks, lse saved), one backward
// (softmax - onehot written into the gradient): no [N, C] probabilities.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  kernels::CrossEntropyResult r = kernels::cross_entropy(logits, target, reduction, ignore_index);
  if (!autograd::any_requires_grad({logits})) return r.loss;
  Tensor ld = logits.detach(), td = target.detach(), lse = r.lse;
  return record(r.loss, "cross_entropy", {logits},
                [=](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{
                      kernels::cross_entropy_backward(g, ld, td, lse, reduction, ignore_index)};
                },
                {ld, td});
}

}  // namespace cohort
