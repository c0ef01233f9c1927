// Internal to the conv2d kernels: the batch-16 drivers (see conv2d_layout.h)
// behind the public conv2d_* functions, used for batches of kMinBatch16 and
// more. Same contracts as the public functions, minus the geometry check.
// A non-null *_mask (same shape as the gradient it goes with) is the output
// of a fused ReLU: the gradient is taken as zero where the mask is <= 0.
#pragma once

#include "cohort/core/kernels/conv2d.h"

namespace cohort::kernels::detail {

// Below this batch a batch-16 vector would be more than half padding.
constexpr int64_t kMinBatch16 = 8;

// Whether the Winograd kernels take this 5x5 stride-1 geometry (forward and
// weight gradient, or with `transposed` the input gradient).
bool winograd_fits(const Conv2dGeometry& g, bool transposed);

// Forward (in = x, out = y), or with `transposed` the stride-1 input
// gradient (in = dy, out = dx; bias and relu unused).
void batch16_conv(const Conv2dGeometry& g, const float* in, const float* w, const float* bias,
                  bool relu, bool transposed, const float* in_mask, float* out);

void batch16_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy,
                             const float* dy_mask, float* dw, float* dbias);

// Both gradients from one pack of dy per group (Winograd geometries whose
// groups split evenly over the thread budget). Returns false without doing
// anything otherwise.
bool batch16_backward_shared(const Conv2dGeometry& g, const float* x, const float* w,
                             const float* dy, const float* dy_mask, float* dx, float* dw,
                             float* dbias);

}  // namespace cohort::kernels::detail
