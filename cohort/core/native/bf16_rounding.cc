#include "cohort/core/native/bf16_rounding.h"

#include <cstring>

#include "cohort/base/parallel.h"

namespace cohort::native {
namespace {

// splitmix64's finaliser: a bijective mix, good enough to give 16 uniform bits.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void to_bf16_stochastic(const float* x, BFloat16* y, int64_t n, uint64_t seed, uint64_t offset) {
  const uint64_t key = mix(seed);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      y[i].bits = 0x7fc0;
      continue;
    }
    // Adding r in [0, 2^16) to the bits below the kept 16 carries into them
    // with probability (low bits) / 2^16: up by one bf16 step that often.
    const uint32_t r = static_cast<uint32_t>(mix(key ^ (offset + static_cast<uint64_t>(i)))) >> 16;
    const bool inf = (u & 0x7fffffffu) == 0x7f800000u;
    y[i].bits = static_cast<uint16_t>((inf ? u : u + r) >> 16);
  }
}

DeviceOp<Tensor(const Tensor&, uint64_t, uint64_t)> to_bf16_stochastic_device("to_bf16_stochastic");

Tensor to_bf16_stochastic(const Tensor& x_in, uint64_t seed, uint64_t offset) {
  COHORT_CHECK(x_in.dtype() == kFloat32, "to_bf16_stochastic: needs float32, got {}",
               dtype_name(x_in.dtype()));
  if (!x_in.is_cpu()) return to_bf16_stochastic_device(x_in.device(), x_in, seed, offset);
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.sizes(), kBFloat16);
  const float* px = x.data_ptr<float>();
  BFloat16* py = y.data_ptr<BFloat16>();
  parallel_for(0, x.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    to_bf16_stochastic(px + b, py + b, e - b, seed, offset + static_cast<uint64_t>(b));
  });
  return y;
}

}  // namespace cohort::native
