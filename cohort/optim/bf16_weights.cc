#include "cohort/optim/bf16_weights.h"

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/bf16_rounding.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::optim {
namespace {

// Each chunk rounds through a bf16 buffer of this many elements on the stack
// of its own task, so no allocation grows with the model.
constexpr int64_t kChunk = 1 << 14;

uint64_t step_seed(uint64_t seed, int64_t step) {
  // A different stream every step; the golden-ratio multiple keeps
  // (seed, step) pairs from colliding for small seeds and steps.
  return seed ^ (static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull);
}

void round_chunk(float* x, int64_t n, WeightRounding rounding, uint64_t seed, uint64_t offset) {
  BFloat16 buf[kChunk];
  if (rounding == WeightRounding::kStochastic)
    native::to_bf16_stochastic(x, buf, n, seed, offset);
  else
    native::to_bf16(x, buf, n);
  native::bf16_to_float(buf, x, n);
}

}  // namespace

const char* weight_rounding_name(WeightRounding rounding) {
  return rounding == WeightRounding::kNearest ? "nearest" : "stochastic";
}

void round_weights_to_bf16(const std::vector<Tensor>& params, WeightRounding rounding,
                           uint64_t seed, int64_t step) {
  const uint64_t s = step_seed(seed, step);
  uint64_t offset = 0;
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor& p = params[j];
    COHORT_CHECK(p.dtype() == kFloat32,
                 "round_weights_to_bf16: parameter {} is {}; bf16 weights need float32 ones", j,
                 dtype_name(p.dtype()));
    if (!p.is_cpu()) {
      // On a device: the rounded copy (the same bits as the CPU's, element i
      // of the row-major order drawing with offset + i), written back.
      Tensor rounded = rounding == WeightRounding::kStochastic
                           ? native::to_bf16_stochastic(p, s, offset)
                           : p.to(kBFloat16);
      Tensor(p).copy_(rounded);
      offset += static_cast<uint64_t>(p.numel());
      continue;
    }
    Tensor work = p.is_contiguous() ? p : p.contiguous();
    float* x = work.data_ptr<float>();
    const uint64_t base = offset;
    parallel_for(0, work.numel(), kChunk, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; c += kChunk) {
        round_chunk(x + c, std::min(kChunk, e - c), rounding, s, base + static_cast<uint64_t>(c));
      }
    });
    if (!work.is_same(p)) Tensor(p).copy_(work);
    offset += static_cast<uint64_t>(p.numel());
  }
}

}  // namespace cohort::optim
