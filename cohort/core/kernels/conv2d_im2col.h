// Internal to the conv2d kernels: the general im2col + sgemm path (any
// geometry, any batch). Same contracts as the public conv2d_* functions, minus
// the geometry check, which the caller has done.
#pragma once

#include "cohort/core/kernels/conv2d.h"

namespace cohort::kernels::detail {

void im2col_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    bool relu, float* y);
void im2col_backward_input(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
void im2col_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                            float* dbias);

}  // namespace cohort::kernels::detail
