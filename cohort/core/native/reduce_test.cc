#include "cohort/core/native/reduce.h"

#include <gtest/gtest.h>

#include "cohort/base/parallel.h"
#include "cohort/core/native/test_util.h"

namespace cohort::native {
namespace {

using testing::random_tensor;

TEST(Reduce, SumMatchesReference) {
  Tensor x = random_tensor({5, 6, 7}, 1);
  for (Shape dims : std::vector<Shape>{{}, {0}, {1}, {2}, {0, 2}, {-1, 0}, {0, 1, 2}}) {
    for (bool keep : {false, true}) {
      Tensor got = sum(x, dims, keep), want = sum_reference(x, dims, keep);
      EXPECT_EQ(got.sizes(), want.sizes()) << shape_str(dims);
      EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5)) << shape_str(dims);
    }
  }
  // Non-contiguous input and big column sums split over threads.
  Tensor big = random_tensor({300, 500}, 2);
  ThreadBudgetGuard g(4);
  EXPECT_TRUE(allclose(sum(big, {0}), sum_reference(big, {0}, false), 1e-5, 1e-4));
  EXPECT_TRUE(allclose(sum(big.transpose(0, 1), {1}), sum_reference(big, {0}, false), 1e-5, 1e-4));
  EXPECT_EQ(sum(Tensor::from_vector<int64_t>({1, 2, 3})).item<int64_t>(), 6);
  // A long single row is summed in blocks: same value for every thread count.
  Tensor longrow = random_tensor({200001}, 3);
  Tensor s1, s4;
  {
    ThreadBudgetGuard one(1);
    s1 = sum(longrow);
  }
  s4 = sum(longrow);
  EXPECT_TRUE(equal(s1, s4));
  EXPECT_TRUE(allclose(s1, sum_reference(longrow, {}, false), 1e-6, 1e-4));
  EXPECT_EQ(sum(Tensor::ones({3}, kUInt8)).dtype(), kInt64);
  EXPECT_THROW(sum(x, {1, 1}), InvalidArgument);
  EXPECT_THROW(sum(x, {3}), InvalidArgument);
}

TEST(Reduce, MeanAndSumTo) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(mean(x).item<float>(), 3.5f);
  EXPECT_EQ(mean(x, {0}).to_vector<float>(), (std::vector<float>{2.5f, 3.5f, 4.5f}));
  EXPECT_EQ(sum_to(x, {3}).to_vector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum_to(x, {2, 1}).to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(sum_to(x, {}).item<float>(), 21.0f);
  EXPECT_TRUE(sum_to(x, {2, 3}).is_same(x));
  EXPECT_THROW(mean(Tensor::ones({2}, kInt64)), InvalidArgument);
}

TEST(Reduce, MaxMinArgmax) {
  Tensor x = Tensor::from_vector<float>({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {2, 2, 3});
  auto [v, i] = max(x, 2);
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{4, 9, 6, 8}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 1, 2}));
  auto [v1, i1] = max(x, 1, true);
  EXPECT_EQ(v1.sizes(), (Shape{2, 1, 3}));
  EXPECT_EQ(v1.to_vector<float>(), (std::vector<float>{3, 5, 9, 3, 6, 8}));
  EXPECT_EQ(i1.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1, 0, 1}));
  auto [v0, i0] = min(x, 0);
  EXPECT_EQ(v0.to_vector<float>(), (std::vector<float>{2, 1, 4, 1, 5, 8}));
  EXPECT_EQ(i0.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0, 0, 1}));
  // Ties: first occurrence.
  EXPECT_EQ(argmax(Tensor::from_vector<float>({1, 7, 7}), 0).item<int64_t>(), 1);
  EXPECT_EQ(max_all(x).item<float>(), 9.0f);
  EXPECT_EQ(min_all(x).item<float>(), 1.0f);
  // NaN wins, as in PyTorch.
  Tensor n = Tensor::from_vector<float>({1, NAN, 3});
  EXPECT_TRUE(std::isnan(max_all(n).item<float>()));
  EXPECT_EQ(argmax(n, 0).item<int64_t>(), 1);
}

}  // namespace
}  // namespace cohort::native
