// linear_cross_entropy against the plain pair cross_entropy(linear(x, w)):
// the loss and both gradients, over several chunks (the last one short), with
// ignored targets and a scaled incoming gradient; without grad mode; errors.
#include "cohort/autograd/linear_cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cohort/autograd/autograd_testing.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/ops.h"

namespace cohort {
namespace {

using autograd::testing::randn;

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>(); }

Tensor targets_with_ignored() {
  Generator gen(9);
  Tensor t = randint(0, 7, {10}, gen);
  t.data_ptr<int64_t>()[2] = t.data_ptr<int64_t>()[9] = -1;
  return t;
}

TEST(LinearCrossEntropy, EqualsCrossEntropyOfLinearInChunks) {
  const Tensor t = targets_with_ignored();
  for (int64_t rows : {0, 3, 10, 64}) {
    SCOPED_TRACE(rows);
    Tensor x1 = randn({10, 5}, 1).set_requires_grad(true),
           w1 = randn({7, 5}, 2).set_requires_grad(true);
    Tensor x2 = x1.detach().clone().set_requires_grad(true),
           w2 = w1.detach().clone().set_requires_grad(true);
    Tensor want = cross_entropy(linear(x1, w1), t, Reduction::kMean, -1);
    Tensor got = linear_cross_entropy(x2, w2, t, -1, rows);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-6);
    mul(want, 2.5).backward();
    mul(got, 2.5).backward();
    EXPECT_LE(max_abs_diff(x2.grad(), x1.grad()), 1e-6);
    EXPECT_LE(max_abs_diff(w2.grad(), w1.grad()), 1e-6);
  }
}

TEST(LinearCrossEntropy, OnlyTheOperandsThatRequireGradGetOne) {
  const Tensor t = targets_with_ignored();
  Tensor x = randn({10, 5}, 1), w = randn({7, 5}, 2).set_requires_grad(true);
  linear_cross_entropy(x, w, t, -1, 4).backward();
  EXPECT_FALSE(x.grad().defined());
  Tensor w2 = w.detach().clone().set_requires_grad(true);
  cross_entropy(linear(x, w2), t, Reduction::kMean, -1).backward();
  EXPECT_LE(max_abs_diff(w.grad(), w2.grad()), 1e-6);
}

TEST(LinearCrossEntropy, WithoutGradModeRecordsNothing) {
  const Tensor t = targets_with_ignored();
  Tensor x = randn({10, 5}, 1).set_requires_grad(true), w = randn({7, 5}, 2);
  NoGradGuard no_grad;
  Tensor got = linear_cross_entropy(x, w, t, -1, 3);
  EXPECT_FALSE(got.requires_grad());
  EXPECT_NEAR(got.item<double>(),
              cross_entropy(linear(x, w), t, Reduction::kMean, -1).item<double>(), 1e-6);
}

TEST(LinearCrossEntropy, EveryTargetIgnoredIsNaN) {
  Tensor t = Tensor::full({4}, -1, kInt64);
  EXPECT_TRUE(
      std::isnan(linear_cross_entropy(randn({4, 3}, 1), randn({5, 3}, 2), t, -1).item<double>()));
}

TEST(LinearCrossEntropy, WrongShapesAndTargetsAreNamed) {
  Tensor x = randn({4, 3}, 1), w = randn({5, 3}, 2);
  EXPECT_THROW(linear_cross_entropy(x, randn({5, 2}, 2), Tensor::zeros({4}, kInt64)),
               InvalidArgument);
  EXPECT_THROW(linear_cross_entropy(x, w, Tensor::zeros({3}, kInt64)), InvalidArgument);
  EXPECT_THROW(linear_cross_entropy(x, w, Tensor::full({4}, 5, kInt64)), InvalidArgument);
}

}  // namespace
}  // namespace cohort
