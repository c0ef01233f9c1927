// The bf16-weights mode against float32 master weights (master_weights_test.cc):
// 65536 weights of 1.0 take a hundred SGD updates of 1e-3 (a fifth of a bf16
// step at 1.0, 2^-7). Rounded to nearest after each step they never move;
// rounded stochastically they move on average as the float32 weight does.
#include "cohort/optim/bf16_weights.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/optim/sgd.h"

namespace cohort::optim {
namespace {

constexpr int kSteps = 100;
constexpr double kLr = 1e-3;

Tensor train_constant_gradient(WeightRounding rounding, uint64_t seed) {
  Tensor w = Tensor::full({256, 256}, 1.0).set_requires_grad(true);
  SGD sgd({w}, SGDOptions{kLr});
  for (int step = 0; step < kSteps; ++step) {
    w.set_grad(Tensor::full({256, 256}, 1.0));
    sgd.step();
    round_weights_to_bf16({w}, rounding, seed, step);
  }
  return w.detach();
}

bool all_bf16_values(const Tensor& t) {
  for (float v : t.to_vector<float>()) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0xffffu) != 0) return false;
  }
  return true;
}

TEST(Bf16Weights, NearestLosesSmallUpdatesStochasticKeepsThemOnAverage) {
  Tensor nearest = train_constant_gradient(WeightRounding::kNearest, 1);
  for (float v : nearest.to_vector<float>()) ASSERT_EQ(v, 1.0f);

  Tensor stochastic = train_constant_gradient(WeightRounding::kStochastic, 1);
  EXPECT_TRUE(all_bf16_values(stochastic));
  const std::vector<float> v = stochastic.to_vector<float>();
  double mean = 0;
  for (float x : v) mean += x;
  mean /= static_cast<double>(v.size());
  // float32 would reach 0.9; each weight's walk has a standard deviation of
  // about 0.02, so the mean of 65536 is within 0.9 +- 0.0005 (six sigmas).
  EXPECT_NEAR(mean, 1.0 - kSteps * kLr, 5e-4);
}

TEST(Bf16Weights, StochasticRoundingIsReproducibleAndIndependentOfThreads) {
  // 65536 elements are four chunks: split over threads or not.
  Tensor a, b;
  {
    ThreadBudgetGuard four(4);
    a = train_constant_gradient(WeightRounding::kStochastic, 7);
  }
  {
    ThreadBudgetGuard one(1);
    b = train_constant_gradient(WeightRounding::kStochastic, 7);
  }
  EXPECT_TRUE(equal(a, b));
  Tensor c = train_constant_gradient(WeightRounding::kStochastic, 8);
  EXPECT_FALSE(equal(a, c)) << "the seed does not reach the rounding";
}

TEST(Bf16Weights, RoundsNonContiguousParametersAndRejectsOtherDtypes) {
  Tensor base = Tensor::full({4, 3}, 1.0 + 1.0 / 1024);  // between two bf16 values
  Tensor t = base.transpose(0, 1);
  ASSERT_FALSE(t.is_contiguous());
  round_weights_to_bf16({t}, WeightRounding::kNearest, 0, 0);
  for (float x : base.to_vector<float>()) EXPECT_EQ(x, 1.0f);
  Tensor d = Tensor::full({2}, 1.0, kFloat64);
  try {
    round_weights_to_bf16({base, d}, WeightRounding::kNearest, 0, 0);
    FAIL() << "a float64 parameter was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 1 is float64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort::optim
