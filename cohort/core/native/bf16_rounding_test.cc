// Stochastic bf16 rounding (bf16_rounding.h): exact values stay, others go to
// one of their two neighbours, unbiased on average, reproducible from the
// seed whatever the thread count; and it keeps the small updates that
// round-to-nearest loses.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/native/bf16_rounding.h"

namespace cohort::native {
namespace {

float down(float x) {  // the bf16 value at or below |x| (truncation)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xffff0000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16Stochastic, NeighboursOnlyUnbiasedAndExactValuesStay) {
  const int n = 200000;
  const float x = 1.0f + 0.3f * std::ldexp(1.0f, -7);  // 30 % of a step above 1
  std::vector<float> xs(n, x);
  std::vector<BFloat16> ys(n);
  to_bf16_stochastic(xs.data(), ys.data(), n, 7);
  double sum = 0;
  int up = 0;
  const float lo = down(x), hi = lo + std::ldexp(1.0f, -7);
  for (const BFloat16& y : ys) {
    const float f = static_cast<float>(y);
    ASSERT_TRUE(f == lo || f == hi) << f;
    up += f == hi;
    sum += f;
  }
  EXPECT_NEAR(static_cast<double>(up) / n, 0.3, 0.01);
  EXPECT_NEAR(sum / n, x, 1e-4);
  for (float exact : {0.0f, 1.0f, -2.5f, std::numeric_limits<float>::infinity()}) {
    BFloat16 y;
    to_bf16_stochastic(&exact, &y, 1, 3);
    EXPECT_EQ(static_cast<float>(y), exact);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  BFloat16 yn;
  to_bf16_stochastic(&nan, &yn, 1, 3);
  EXPECT_EQ(yn.bits, 0x7fc0);
}

TEST(Bf16Stochastic, ReproducibleFromTheSeedOnAnyThreadCount) {
  Tensor x = Tensor::from_vector(std::vector<float>(300000, 0.1234567f));
  auto bits = [&](uint64_t seed, int threads) {
    ThreadBudgetGuard budget(threads);
    Tensor y = to_bf16_stochastic(x, seed);
    std::vector<uint16_t> b(static_cast<size_t>(y.numel()));
    std::memcpy(b.data(), y.data_ptr<BFloat16>(), b.size() * 2);
    return b;
  };
  EXPECT_EQ(bits(5, 1), bits(5, 2));
  EXPECT_NE(bits(5, 1), bits(6, 1));
}

// w = 1.0 updated by -1e-3 a hundred times, stored in bf16 after each update:
// round-to-nearest never moves (see optim/master_weights_test.cc), stochastic
// rounding tracks 0.9 on average.
TEST(Bf16Stochastic, KeepsSmallUpdatesOnAverage) {
  double mean = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    BFloat16 w(1.0f);
    for (int s = 0; s < 100; ++s) {
      const float next = static_cast<float>(w) - 1e-3f;
      to_bf16_stochastic(&next, &w, 1, 11, static_cast<uint64_t>(t * 100 + s));
    }
    mean += static_cast<float>(w);
  }
  mean /= trials;
  EXPECT_NEAR(mean, 0.9, 0.01);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f - 1e-3f)), 1.0f);  // nearest loses it
}

}  // namespace
}  // namespace cohort::native
