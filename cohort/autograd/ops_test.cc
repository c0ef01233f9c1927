// Forward values and error messages of the differentiable ops (gradients are
// covered by gradcheck_test.cc).
#include "cohort/autograd/ops.h"

#include <gtest/gtest.h>

#include <string>

namespace cohort {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Ops, ErrorsNameTheOpAndShapes) {
  Tensor a = Tensor::ones({3}), b = Tensor::ones({4});
  EXPECT_NE(error_of([&] { add(a, b); }).find("add: shapes [3] and [4] do not broadcast"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv2d(Tensor::ones({3, 28, 28}), Tensor::ones({20, 1, 5, 5}));
            }).find("conv2d: input must be 4-D [N, C, H, W], got [3, 28, 28]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv2d(Tensor::ones({1, 3, 8, 8}), Tensor::ones({2, 1, 3, 3}));
            }).find("has 3 channels but weight [2, 1, 3, 3] expects 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              linear(Tensor::ones({2, 5}), Tensor::ones({4, 6}));
            }).find("linear: input [2, 5] does not match weight [4, 6]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              matmul(Tensor::ones({2, 3}), Tensor::ones({2, 3}));
            }).find("mm: shapes [2, 3] and [2, 3] cannot be multiplied"),
            std::string::npos);
  EXPECT_NE(error_of([&] { mse_loss(a, b); }).find("mse_loss: input [3] and target [4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              reshape(a, {2, 2});
            }).find("reshape: shape [2, 2] is invalid"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              max_pool2d(Tensor::ones({1, 1, 4, 4}), {5, 5});
            }).find("max_pool2d"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              cross_entropy(Tensor::ones({2, 3}), Tensor::from_vector<int64_t>({0, 3}));
            }).find("target 3 out of range [0, 3)"),
            std::string::npos);
}

TEST(Ops, ForwardValues) {
  Tensor a = Tensor::from_vector<float>({1, -2, 3, -4}, {2, 2});
  EXPECT_EQ((a * 2.0 + 1.0).to_vector<float>(), (std::vector<float>{3, -3, 7, -7}));
  EXPECT_EQ((1.0 - a).to_vector<float>(), (std::vector<float>{0, 3, -2, 5}));
  EXPECT_EQ((12.0 / a).to_vector<float>(), (std::vector<float>{12, -6, 4, -3}));
  EXPECT_EQ(relu(a).to_vector<float>(), (std::vector<float>{1, 0, 3, 0}));
  EXPECT_EQ(abs(a).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(clamp(a, -1, 2).to_vector<float>(), (std::vector<float>{1, -1, 2, -1}));
  EXPECT_EQ(sum(a, {1}).to_vector<float>(), (std::vector<float>{-1, -1}));
  EXPECT_EQ(mean(a).item<float>(), -0.5f);
  EXPECT_EQ(matmul(a, a).to_vector<float>(), (std::vector<float>{-5, 6, -9, 10}));
  EXPECT_EQ(argmax(a, 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  auto [v, i] = max(a, 0);
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{3, -2}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(gt(a, 0.0).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_EQ(stack({a, a}, 0).sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(cat({a, a}, 1).sizes(), (Shape{2, 4}));
  Tensor e =
      embedding(Tensor::arange(0.0, 6.0).reshape({3, 2}), Tensor::from_vector<int64_t>({2, 0}));
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{4, 5, 0, 1}));
  EXPECT_NEAR(gelu(Tensor::scalar(1.0)).item<double>(), 0.8413447460685429, 1e-6);
  EXPECT_NEAR(sigmoid(Tensor::scalar(0.0)).item<double>(), 0.5, 1e-7);
  // Views share storage with their input.
  Tensor t = transpose(a, 0, 1);
  EXPECT_EQ(t.storage(), a.storage());
}

TEST(Ops, DropoutFollowsTrainingFlagAndGenerator) {
  Tensor x = Tensor::ones({1000});
  Generator g1(5), g2(5);
  EXPECT_TRUE(dropout(x, 0.5, false, g1).is_same(x));
  Tensor d1 = dropout(x, 0.5, true, g1), d2 = dropout(x, 0.5, true, g2);
  EXPECT_TRUE(equal(d1, d2));
  for (float v : d1.to_vector<float>()) ASSERT_TRUE(v == 0.0f || v == 2.0f);
  EXPECT_THROW(dropout(x, 1.5, true, g1), InvalidArgument);
}

TEST(Ops, BatchNormEvalUsesRunningStats) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor rm = Tensor::from_vector<float>({1, 1}), rv = Tensor::from_vector<float>({4, 4});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 0.0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0.5f, 1, 1.5f}));
  EXPECT_EQ(rm.to_vector<float>(), (std::vector<float>{1, 1}));  // eval leaves buffers alone
}

}  // namespace
}  // namespace cohort
