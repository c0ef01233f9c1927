// Internal to the conv2d kernels: the batch-16 drivers (see conv2d_layout.h)
// behind the public conv2d_* functions, used for batches of kMinBatch16 and
// more. One copy per ISA (conv2d_batch16_isa.cc); batch16_ops() gives the
// copy of the current kernel path. Same contracts as the public functions,
// minus the geometry check. A non-null *_mask (same shape as the gradient it
// goes with) is the output of a fused ReLU: the gradient is taken as zero
// where the mask is <= 0.
#pragma once

#include "cohort/core/kernels/conv2d.h"

namespace cohort::kernels::detail {

// Below this batch a batch-16 vector would be more than half padding.
constexpr int64_t kMinBatch16 = 8;

struct Batch16Ops {
  // Forward (in = x, out = y), or with `transposed` the stride-1 input
  // gradient (in = dy, out = dx; bias and relu unused).
  void (*conv)(const Conv2dGeometry& g, const float* in, const float* w, const float* bias,
               bool relu, bool transposed, const float* in_mask, float* out);
  void (*backward_weight)(const Conv2dGeometry& g, const float* x, const float* dy,
                          const float* dy_mask, float* dw, float* dbias);
  // Both gradients from one pack of dy per group (Winograd geometries whose
  // groups split evenly over the thread budget). Returns false without doing
  // anything otherwise.
  bool (*backward_shared)(const Conv2dGeometry& g, const float* x, const float* w, const float* dy,
                          const float* dy_mask, float* dx, float* dw, float* dbias);
};

// The batch-16 kernels of kernel_path() (cohort/base/cpu.h); null on the
// baseline path, which uses im2col + BLAS instead.
const Batch16Ops* batch16_ops();

}  // namespace cohort::kernels::detail
