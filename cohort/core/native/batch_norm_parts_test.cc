// The parts of batch norm (batch_norm_parts.h) put together over one
// process's batch must give norm.h's batch_norm and batch_norm_backward, the
// oracle; on strided inputs and in both floating dtypes.
#include "cohort/core/native/batch_norm_parts.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cohort/core/native/norm.h"
#include "cohort/core/native/test_util.h"

namespace cohort::native {
namespace {

using testing::random_tensor;

Tensor invstd_of(const BatchNormStats& s, double eps) {
  std::vector<double> v = s.var.to_vector<double>();
  for (double& e : v) e = 1.0 / std::sqrt(e + eps);
  return Tensor::from_vector(v);
}

void expect_parts_match_batch_norm(const Tensor& x, const Tensor& w, const Tensor& b, double tol) {
  const double eps = 1e-5;
  BatchNormStats s = batch_norm_stats(x);
  EXPECT_EQ(s.count, x.numel() / x.size(1));
  Tensor invstd = invstd_of(s, eps);
  BatchNormResult want = batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, eps);
  EXPECT_TRUE(allclose(s.mean, want.mean, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(invstd, want.rstd, 1e-9, 1e-9));
  Tensor out = batch_norm_elemt(x, s.mean, invstd, w, b);
  EXPECT_TRUE(allclose(out, want.out, tol, tol));

  Tensor g = random_tensor(x.sizes(), 77, x.dtype());
  BatchNormGrads gw = batch_norm_backward(g, x, want.mean, want.rstd, w, true, true, true, true);
  BatchNormGradSums sums = batch_norm_backward_reduce(g, x, s.mean, invstd);
  EXPECT_TRUE(allclose(sums.sum_dy.to(x.dtype()), gw.dbias, tol, tol));
  EXPECT_TRUE(allclose(sums.sum_dy_xhat.to(x.dtype()), gw.dweight, tol, tol));
  Tensor dx =
      batch_norm_backward_elemt(g, x, s.mean, invstd, w, sums.sum_dy, sums.sum_dy_xhat, s.count);
  EXPECT_TRUE(allclose(dx, gw.dx, tol, tol));
}

TEST(BatchNormParts, OneProcessMatchesBatchNormFloat64) {
  Tensor x = random_tensor({5, 3, 4, 2}, 1, kFloat64, -1, 5);  // mean far from 0
  expect_parts_match_batch_norm(x, random_tensor({3}, 2, kFloat64), random_tensor({3}, 3, kFloat64),
                                1e-10);
  expect_parts_match_batch_norm(random_tensor({6, 4}, 4, kFloat64), Tensor(), Tensor(), 1e-10);
}

TEST(BatchNormParts, OneProcessMatchesBatchNormFloat32Strided) {
  // A [C, N, L] tensor seen as [N, C, L]: not contiguous.
  Tensor x = random_tensor({3, 4, 5}, 5, kFloat32).transpose(0, 1);
  ASSERT_FALSE(x.is_contiguous());
  expect_parts_match_batch_norm(x, random_tensor({3}, 6, kFloat32), random_tensor({3}, 7, kFloat32),
                                1e-5);
}

TEST(BatchNormParts, EmptyBatchHasZeroCountAndZeroSums) {
  Tensor x = Tensor::zeros({0, 3, 2, 2});
  BatchNormStats s = batch_norm_stats(x);
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.mean.to_vector<double>(), std::vector<double>(3, 0.0));
  Tensor ones = Tensor::ones({3}, kFloat64);
  EXPECT_EQ(batch_norm_elemt(x, s.mean, ones, Tensor(), Tensor()).sizes(), x.sizes());
  BatchNormGradSums sums = batch_norm_backward_reduce(x, x, s.mean, ones);
  EXPECT_EQ(sums.sum_dy_xhat.to_vector<double>(), std::vector<double>(3, 0.0));
  // Its input gradient, for statistics taken over other processes' values.
  EXPECT_EQ(
      batch_norm_backward_elemt(x, x, s.mean, ones, Tensor(), sums.sum_dy, sums.sum_dy_xhat, 10)
          .sizes(),
      x.sizes());
}

TEST(BatchNormParts, ShapesThatDoNotFitAreRejected) {
  Tensor x = random_tensor({2, 3}, 8, kFloat32);
  Tensor m = Tensor::zeros({3}, kFloat64), bad = Tensor::zeros({4}, kFloat64);
  EXPECT_THROW(batch_norm_stats(Tensor::zeros({4})), InvalidArgument);
  EXPECT_THROW(batch_norm_elemt(x, bad, m, Tensor(), Tensor()), InvalidArgument);
  EXPECT_THROW(batch_norm_backward_reduce(Tensor::zeros({3, 3}), x, m, m), InvalidArgument);
  EXPECT_THROW(batch_norm_backward_elemt(x, x, m, m, Tensor(), m, m, 0), InvalidArgument);
}

}  // namespace
}  // namespace cohort::native
