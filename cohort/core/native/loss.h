// Loss kernels (not recorded by autograd).
// nll_loss: input [N, C] log-probabilities (or [C] for one sample), target
// int64 [N] class indices in [0, C) or == ignore_index (skipped). Reductions as
// in PyTorch: kMean divides by the number of non-ignored targets (NaN when all
// are ignored), kSum sums, kNone returns [N].
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort {

// How a loss reduces over samples (PyTorch's reduction="none"|"mean"|"sum").
// In namespace cohort (not native) so that calls with it do not find the
// native kernels by argument-dependent lookup.
enum class Reduction { kNone, kMean, kSum };

}  // namespace cohort

namespace cohort::native {

// Sentinel meaning "no ignore_index" (PyTorch's default -100 is a valid
// choice too; pass it explicitly to get it).
constexpr int64_t kNoIgnoreIndex = INT64_MIN;

Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                int64_t ignore_index = kNoIgnoreIndex);
// Gradient w.r.t. input given the gradient of the (reduced) loss.
Tensor nll_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction, int64_t ignore_index = kNoIgnoreIndex);

// Device kernels of the two ops above (device_dispatch.h).
extern DeviceOp<Tensor(const Tensor&, const Tensor&, Reduction, int64_t)> nll_loss_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&, Reduction, int64_t)>
    nll_loss_backward_device;

}  // namespace cohort::native
