// PowerSGD (powersgd_hook.h) against plain all_reduce: the same before
// start_powerSGD_iter, convergent and identical on every replica after it,
// and far fewer bytes on a GPT-sized layer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/comm_hooks/comm_hooks_testing.h"
#include "cohort/parallel/comm_hooks/powersgd_hook.h"

namespace cohort::parallel {
namespace {

using testing::on_ranks;
using testing::train;
using testing::TrainResult;

void expect_equal(const TrainResult& a, const TrainResult& b, const std::string& what) {
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i)
    EXPECT_TRUE(equal(a.parameters[i].second, b.parameters[i].second))
        << what << ": " << a.parameters[i].first;
}

double mean_of_last(const std::vector<double>& v, size_t n) {
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(n), v.end(), 0.0) /
         static_cast<double>(n);
}

TEST(PowerSGDHook, EqualsAllreduceBeforeStartIter) {
  const int kSteps = 4;
  const auto plain = on_ranks(2, [](auto pg) { return train(pg, nullptr, kSteps); });
  const auto power = on_ranks(2, [](auto pg) {
    return train(pg, powersgd_hook({.matrix_approximation_rank = 2, .start_powerSGD_iter = kSteps}),
                 kSteps);
  });
  const auto batched = on_ranks(2, [](auto pg) {
    return train(pg, batched_powersgd_hook({.start_powerSGD_iter = kSteps}), kSteps);
  });
  for (int r = 0; r < 2; ++r) {
    expect_equal(plain[r], power[r], "powersgd");
    expect_equal(plain[r], batched[r], "batched_powersgd");
    EXPECT_EQ(plain[r].step_bytes, power[r].step_bytes);
  }
}

// With error feedback and warm start (the defaults), rank 2: the loss falls
// about as far as with all_reduce, and the replicas agree bit for bit.
TEST(PowerSGDHook, ConvergesAfterStartIterAndReplicasStayIdentical) {
  const int kSteps = 150;
  std::shared_ptr<PowerSGDHook> hooks[2];
  const auto plain = on_ranks(2, [](auto pg) { return train(pg, nullptr, kSteps, 16, 64, 16); });
  const auto power = on_ranks(2, [&](auto pg) {
    auto hook = powersgd_hook({.matrix_approximation_rank = 2, .start_powerSGD_iter = 3});
    hooks[pg->rank()] = hook;
    return train(pg, hook, kSteps, 16, 64, 16);
  });
  expect_equal(power[0], power[1], "replicas");
  const double first = power[0].losses.front(), last = mean_of_last(power[0].losses, 10);
  const double plain_last = mean_of_last(plain[0].losses, 10);
  std::printf("loss %.4g -> %.4g with PowerSGD, %.4g with all_reduce\n", first, last, plain_last);
  EXPECT_LT(last, 0.2 * first) << "first " << first << ", all_reduce's last " << plain_last;
  EXPECT_LT(last, 1.25 * plain_last) << "all_reduce's " << plain_last;
  // The weights were compressed: fewer numbers than gradients.
  EXPECT_GT(hooks[0]->state().compression_rate(), 2.0);
  EXPECT_EQ(hooks[0]->state().iter(), kSteps);
  EXPECT_LT(power[0].step_bytes.back(), plain[0].step_bytes.back());
}

TEST(PowerSGDHook, WithoutWarmStartOrErrorFeedbackReplicasStayIdentical) {
  const auto power = on_ranks(2, [](auto pg) {
    return train(pg,
                 powersgd_hook({.matrix_approximation_rank = 1,
                                .start_powerSGD_iter = 1,
                                .use_error_feedback = false,
                                .warm_start = false}),
                 20, 16, 64, 16);
  });
  expect_equal(power[0], power[1], "replicas");
  EXPECT_LT(power[0].losses.back(), power[0].losses.front());
}

// Nothing worth compressing: every tensor goes into the one plain all_reduce
// (a sum divided after, not an average: float rounding apart, all_reduce).
TEST(PowerSGDHook, UncompressibleTensorsAreAllReducedPlainly) {
  const auto plain = on_ranks(2, [](auto pg) { return train(pg, nullptr, 5); });
  const auto power = on_ranks(2, [](auto pg) {
    return train(pg, powersgd_hook({.start_powerSGD_iter = 2, .min_compression_rate = 1e9}), 5);
  });
  EXPECT_EQ(plain[0].step_bytes, power[0].step_bytes);
  for (size_t i = 0; i < plain[0].parameters.size(); ++i)
    EXPECT_TRUE(allclose(plain[0].parameters[i].second, power[0].parameters[i].second, 1e-5, 1e-6))
        << plain[0].parameters[i].first;
  expect_equal(power[0], power[1], "replicas");
}

// GPT-2 small's MLP (768 -> 3072 -> 768): rank 2 sends (n + m) 2 numbers per
// weight and the biases whole.
TEST(PowerSGDHook, RankTwoOnAGptSizedLayerMovesTenTimesFewerBytes) {
  const auto power = on_ranks(2, [](auto pg) {
    return train(pg, powersgd_hook({.matrix_approximation_rank = 2, .start_powerSGD_iter = 2}), 3,
                 768, 3072, 768, 1e-3);
  });
  const std::vector<size_t>& bytes = power[0].step_bytes;
  const size_t weights = 2 * (768 + 3072) * 2 * sizeof(float),
               biases = (3072 + 768) * sizeof(float);
  EXPECT_EQ(bytes[2], weights + biases);
  EXPECT_GE(static_cast<double>(bytes[0]) / static_cast<double>(bytes[2]), 10.0)
      << bytes[0] << " bytes by all_reduce, " << bytes[2] << " by PowerSGD";
  expect_equal(power[0], power[1], "replicas");
}

TEST(BatchedPowerSGDHook, ConvergesAndMovesTwoSquareSidesOfBytes) {
  const int kSteps = 150;
  const auto power = on_ranks(2, [](auto pg) {
    return train(pg,
                 batched_powersgd_hook({.matrix_approximation_rank = 1, .start_powerSGD_iter = 3}),
                 kSteps, 16, 64, 16);
  });
  expect_equal(power[0], power[1], "replicas");
  std::printf("loss %.4g -> %.4g with batched PowerSGD\n", power[0].losses.front(),
              mean_of_last(power[0].losses, 10));
  EXPECT_LT(mean_of_last(power[0].losses, 10), 0.2 * power[0].losses.front());
  // Buckets of one tensor each (bucket_cap_mb 0.001): a [64, 16] weight is
  // a 32 x 32 square, so P and Q are 32 x 1 each.
  size_t want = 0;
  for (const auto& [name, t] : power[0].parameters) {
    const auto side = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(t.numel()))));
    want += 2 * side * sizeof(float);
  }
  EXPECT_EQ(power[0].step_bytes.back(), want);
}

TEST(PowerSGDOrthogonalize, GivesOrthonormalColumnsAndKeepsZeroColumnsZero) {
  Generator gen(3);
  Tensor m = randn({50, 3}, gen);
  orthogonalize(m);
  Tensor gram = matmul(m.transpose(0, 1), m);
  const std::vector<float> g = gram.contiguous().to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(g[i * 3 + j], i == j ? 1.0 : 0.0, 1e-5) << i << j;
  Tensor z = Tensor::zeros({5, 2});
  orthogonalize(z);
  EXPECT_TRUE(equal(z, Tensor::zeros({5, 2})));
}

TEST(PowerSGDState, RefusesWhatPyTorchRefuses) {
  EXPECT_THROW(PowerSGDHook({.start_powerSGD_iter = 1}), InvalidArgument);
  EXPECT_THROW(PowerSGDHook({.matrix_approximation_rank = 0}), InvalidArgument);
  EXPECT_NO_THROW(
      PowerSGDHook({.start_powerSGD_iter = 0, .use_error_feedback = false, .warm_start = false}));
}

}  // namespace
}  // namespace cohort::parallel
