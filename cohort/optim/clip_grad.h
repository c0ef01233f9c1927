// Gradient clipping, as torch.nn.utils.clip_grad_norm_ (PyTorch 1.13).
// The total norm is the norm_type-norm of all gradients taken together
// (norm_type = inf: the largest absolute value); when
// max_norm / (total + 1e-6) < 1 every gradient is scaled in place by that
// coefficient. Parameters without a gradient are skipped. Returns the total
// norm before clipping (0 when no parameter has a gradient).
// error_if_nonfinite: throw InvalidArgument when the total norm is NaN or inf
// (then no gradient is changed); otherwise a NaN norm makes the gradients
// NaN, as in PyTorch. Runs under NoGradGuard.
// Thread safety: the caller must not run backward on these parameters at the
// same time.
#pragma once

#include <limits>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// The same total norm without clipping.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

}  // namespace cohort::optim
