#include "cohort/core/native/softmax.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cohort/core/native/loss.h"
#include "cohort/core/native/test_util.h"

namespace cohort::native {
namespace {

using testing::random_tensor;

TEST(Softmax, LogSoftmaxMatchesReference) {
  Tensor x = random_tensor({4, 5, 6}, 1, kFloat32, -20, 20);
  for (int64_t d : {0, 1, 2, -1}) {
    EXPECT_TRUE(allclose(log_softmax(x, d), log_softmax_reference(x, d), 1e-5, 1e-5)) << d;
    Tensor s = softmax(x, d);
    Tensor want = log_softmax_reference(x.to(kFloat64), d);
    auto sv = s.to_vector<double>(), wv = want.to_vector<double>();
    for (size_t i = 0; i < sv.size(); ++i) ASSERT_NEAR(sv[i], std::exp(wv[i]), 1e-6);
  }
  // Large logits stay finite.
  Tensor big = Tensor::from_vector<float>({1000, 0, -1000}, {1, 3});
  auto v = log_softmax(big, 1).to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], -1000.0f);
}

TEST(Softmax, NllLossReductionsAndIgnoreIndex) {
  Tensor logp = Tensor::from_vector<float>({-1, -2, -3, -4, -5, -6}, {2, 3});
  Tensor t = Tensor::from_vector<int64_t>({2, 0});
  EXPECT_FLOAT_EQ(nll_loss(logp, t, Reduction::kMean).item<float>(), 3.5f);
  EXPECT_FLOAT_EQ(nll_loss(logp, t, Reduction::kSum).item<float>(), 7.0f);
  EXPECT_EQ(nll_loss(logp, t, Reduction::kNone).to_vector<float>(), (std::vector<float>{3, 4}));
  Tensor ti = Tensor::from_vector<int64_t>({2, -100});
  EXPECT_FLOAT_EQ(nll_loss(logp, ti, Reduction::kMean, -100).item<float>(), 3.0f);
  Tensor g = nll_loss_backward(Tensor::scalar(1.0), logp, ti, Reduction::kMean, -100);
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{0, 0, -1, 0, 0, 0}));
  EXPECT_THROW(nll_loss(logp, Tensor::from_vector<int64_t>({3, 0}), Reduction::kMean),
               InvalidArgument);
  EXPECT_THROW(nll_loss(logp, Tensor::from_vector<int64_t>({0}), Reduction::kMean),
               InvalidArgument);
  EXPECT_THROW(nll_loss(logp, Tensor::from_vector<float>({0, 1}), Reduction::kMean),
               InvalidArgument);
}

}  // namespace
}  // namespace cohort::native
