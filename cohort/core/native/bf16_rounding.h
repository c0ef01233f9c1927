// Stochastic rounding of float32 to bfloat16, for a mode that stores weights
// in bf16 (llm.c's): x rounds up with probability equal to its distance from
// the bf16 value below, so the rounding is unbiased (E[round(x)] = x) and
// updates smaller than half a bf16 step survive on average, which
// round-to-nearest loses (optim/master_weights_test.cc).
// Reproducible: element i of a call draws its 16 random bits from a
// counter-based hash of (seed, offset + i), never from shared generator state,
// so the result depends only on (x, seed, offset), not on threads or
// call order. NaN stays NaN (0x7fc0); a value whose rounding up would overflow
// to infinity may do so with the probability above, as llm.c's.
// Pure functions; thread safe.
#pragma once

#include <cstdint>

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

// y[i] = stochastic bf16 of x[i], drawing with (seed, offset + i).
void to_bf16_stochastic(const float* x, BFloat16* y, int64_t n, uint64_t seed, uint64_t offset = 0);
// The same on a float32 tensor (any layout; the result is contiguous, element
// i of the row-major order drawing with offset + i).
Tensor to_bf16_stochastic(const Tensor& x, uint64_t seed, uint64_t offset = 0);
// Its device kernel (device_dispatch.h): the same bits on every device.
extern DeviceOp<Tensor(const Tensor&, uint64_t, uint64_t)> to_bf16_stochastic_device;

}  // namespace cohort::native
