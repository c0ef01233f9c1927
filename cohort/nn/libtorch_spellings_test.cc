// The spellings a LibTorch user reaches for, with LibTorch's meaning:
// Conv2dOptions(in, out, kernel) with chained setters, Dropout2d, and
// max_pool2d with an int kernel.
#include <gtest/gtest.h>

#include "cohort/nn/nn.h"
#include "cohort/nn/test_util.h"

namespace cohort::nn {
namespace {

using testing::expect_error;

TEST(Conv2dOptions, ChainsLikeLibTorch) {
  Conv2dOptions o = Conv2dOptions(1, 10, 5).stride(2).padding({1, 0}).bias(false);
  EXPECT_EQ(o.in_channels(), 1);
  EXPECT_EQ(o.out_channels(), 10);
  EXPECT_EQ(o.kernel_size(), (std::array<int64_t, 2>{5, 5}));
  EXPECT_EQ(o.stride(), (std::array<int64_t, 2>{2, 2}));
  EXPECT_EQ(o.padding(), (std::array<int64_t, 2>{1, 0}));
  EXPECT_FALSE(o.bias());
  EXPECT_TRUE(Conv2dOptions().bias());
}

TEST(Conv2d, FromOptionsEqualsTheArgumentForm) {
  Generator a(3), b(3);
  Conv2d from_options(Conv2dOptions(2, 4, {3, 2}).stride(2).padding(1), a);
  Conv2d from_args(2, 4, {3, 2}, b, Conv2dOptions().stride(2).padding(1));
  EXPECT_TRUE(equal(from_options.weight(), from_args.weight()));
  EXPECT_TRUE(equal(from_options.bias(), from_args.bias()));
  Tensor x = rand({1, 2, 7, 6}, a);
  EXPECT_TRUE(equal(from_options(x), from_args(x)));
  EXPECT_EQ(from_options(x).sizes(), (Shape{1, 4, 4, 4}));
  expect_error([&] { Conv2d(Conv2dOptions(), a); }, {"Conv2d", "Conv2dOptions(in, out, kernel)"});
  expect_error([&] { Conv2d(Conv2dOptions(1, 2, 3).stride(0), a); }, {"stride", "positive"});
}

TEST(Dropout2d, ZeroesWholeChannelsAndScalesTheRest) {
  Generator gen(5);
  Dropout2d drop(0.25, gen);
  Tensor x = Tensor::ones({20, 50, 3, 4}).set_requires_grad(true);
  Tensor y = drop(x);
  std::vector<float> v = y.to_vector<float>();
  int dropped = 0;
  for (size_t plane = 0; plane < 20 * 50; ++plane) {
    float first = v[plane * 12];
    EXPECT_TRUE(first == 0.0f || first == 1.0f / 0.75f) << first;
    for (size_t i = 1; i < 12; ++i) ASSERT_EQ(v[plane * 12 + i], first) << "plane " << plane;
    dropped += first == 0.0f;
  }
  EXPECT_NEAR(dropped / 1000.0, 0.25, 0.05);
  y.sum().backward();  // the gradient is the mask itself
  EXPECT_TRUE(equal(x.grad(), y.detach()));
  drop.eval();
  EXPECT_TRUE(equal(drop(x), x));
  EXPECT_EQ(drop(Tensor::ones({3, 2, 2})).sizes(), (Shape{3, 2, 2}));
  expect_error([&] { drop(Tensor::ones({4, 4})); }, {"Dropout2d", "[N, C, H, W]", "[4, 4]"});
  expect_error([&] { Dropout2d(-0.1, gen); }, {"Dropout2d", "-0.1"});
  Dropout2d all(1.0, gen);
  EXPECT_EQ(max(all(Tensor::ones({2, 3, 2, 2}))).item<float>(), 0.0f);
}

TEST(MaxPool2d, FunctionalTakesAnIntKernel) {
  Generator gen(4);
  Tensor x = rand({2, 3, 8, 6}, gen);
  EXPECT_TRUE(equal(max_pool2d(x, 2), max_pool2d(x, {2, 2})));
  EXPECT_TRUE(equal(max_pool2d(x, 3, 1, 1), max_pool2d(x, {3, 3}, {1, 1}, {1, 1})));
  EXPECT_EQ(max_pool2d(x, 2).sizes(), (Shape{2, 3, 4, 3}));
}

}  // namespace
}  // namespace cohort::nn
