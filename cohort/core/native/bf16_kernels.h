// Internal to the bf16 matrix products (linalg_bf16.cc): the conversion loops
// between float32 and bfloat16, one copy per fast kernel path (the bf16
// column of the kernel tables; bf16_kernels_isa.cc, plain branch-free loops
// that the compiler vectorises for the ISA), null on the baseline path, where
// linalg_bf16.cc runs BFloat16's own conversion (cohort/core/dtype.h), the
// reference these copies are tested against bit for bit.
// Rounding is to nearest, ties to even; NaN becomes the quiet NaN 0x7fc0.
// Pure functions; thread safe.
#pragma once

#include <cstdint>

namespace cohort::native {

struct Bf16Kernels {
  // y[i] = bf16(x[i]) for i < n; y may not overlap x.
  void (*to_bf16)(const float* x, uint16_t* y, int64_t n);
  // y[i] = float(x[i]) (exact) for i < n.
  void (*to_float)(const uint16_t* x, float* y, int64_t n);
};

// The copy of the kernel path in use; null on the baseline path.
const Bf16Kernels* bf16_kernels();

}  // namespace cohort::native
