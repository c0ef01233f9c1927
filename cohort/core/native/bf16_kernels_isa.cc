// The float32 <-> bfloat16 conversion loops (bf16_kernels.h) for one ISA.
#include <cstdint>
#include <cstring>

#include "cohort/base/isa.h"
#include "cohort/core/native/bf16_kernels.h"

COHORT_ISA_BEGIN
namespace cohort::native::COHORT_ISA_NS {
namespace {

// Round to nearest even on the bits (as BFloat16(float)); a NaN (exponent all
// ones and a mantissa) becomes 0x7fc0. Written without branches so that the
// loop vectorises.
void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    y[i] = static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
  }
}

void to_float(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

}  // namespace

extern const Bf16Kernels kBf16Kernels;
const Bf16Kernels kBf16Kernels{to_bf16, to_float};

}  // namespace cohort::native::COHORT_ISA_NS
COHORT_ISA_END
