// Internal to the pool2d kernels: the vectorized 2x2 / stride 2 / no-padding
// planes, one copy per ISA (pool2d_isa.cc); pool2d_fast_ops() gives the copy
// of the current kernel path (cohort/base/cpu.h), null on the baseline path.
// Same contracts as pool2d.h, for one plane.
#pragma once

#include <cstdint>

#include "cohort/core/kernels/pool2d.h"

namespace cohort::kernels::detail {

struct Pool2dFastOps {
  void (*forward_2x2)(const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax);
  // Writes all of dx's plane (windows do not overlap: no clearing pass).
  void (*backward_2x2)(const Pool2dGeometry& g, const float* dy, const int32_t* argmax, float* dx);
};

const Pool2dFastOps* pool2d_fast_ops();

}  // namespace cohort::kernels::detail
