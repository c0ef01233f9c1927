#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"

#include <algorithm>
#include <cmath>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/model_check.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"

namespace cohort::parallel {

double grad_norm_tensor_parallel(const nn::Module& model, distributed::ProcessGroup& tp,
                                 double norm_type) {
  COHORT_CHECK(norm_type > 0,
               "clip_grad_norm_tensor_parallel (rank {}): norm_type must be positive or inf, got "
               "{}",
               tp.rank(), norm_type);
  const bool inf = std::isinf(norm_type);
  // sum |g|^p (or max |g|) of one parameter, from optim's norm of it alone.
  auto part = [&](const Tensor& p) {
    double n = optim::grad_norm({p}, norm_type);
    return inf ? n : std::pow(n, norm_type);
  };
  double sharded = 0, replicated = 0;
  for (const ParameterLayout& p : parameter_layouts(model)) {
    if (!p.tensor.grad().defined()) continue;
    double& acc = p.split_dim == kReplicated ? replicated : sharded;
    acc = inf ? std::max(acc, part(p.tensor)) : acc + part(p.tensor);
  }
  Tensor t = Tensor::scalar(sharded, kFloat64).to(exchange_device(tp, module_device(model)));
  tp.all_reduce(t, {.op = inf ? distributed::ReduceOp::kMax : distributed::ReduceOp::kSum});
  sharded = t.cpu().item<double>();
  if (inf) return std::max(sharded, replicated);
  const double total = sharded + replicated;
  return norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);
}

double clip_grad_norm_tensor_parallel(const nn::Module& model, double max_norm,
                                      distributed::ProcessGroup& tp, double norm_type,
                                      bool error_if_nonfinite) {
  const double total = grad_norm_tensor_parallel(model, tp, norm_type);
  COHORT_CHECK(!error_if_nonfinite || std::isfinite(total),
               "clip_grad_norm_tensor_parallel (rank {} of group {}): the total norm of order {} "
               "of the gradients is non-finite ({}), so they cannot be clipped",
               tp.rank(), tp.name(), norm_type, total);
  const double coef = max_norm / (total + 1e-6);
  // As optim::clip_grad_norm: a NaN total poisons the gradients rather than passing silently.
  if (!(coef >= 1.0)) {
    NoGradGuard no_grad;
    for (const ParameterLayout& p : parameter_layouts(model))
      if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(coef);
  }
  return total;
}

}  // namespace cohort::parallel
