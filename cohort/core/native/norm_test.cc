#include "cohort/core/native/norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cohort/core/native/test_util.h"

namespace cohort::native {
namespace {

using testing::random_tensor;

TEST(Norm, LayerNormNormalisesRows) {
  Tensor x = random_tensor({3, 8}, 1, kFloat64);
  Tensor w = random_tensor({8}, 2, kFloat64), b = random_tensor({8}, 3, kFloat64);
  LayerNormResult r = layer_norm(x, {8}, w, b, 1e-5);
  auto xv = x.to_vector<double>(), ov = r.out.to_vector<double>();
  auto wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (int row = 0; row < 3; ++row) {
    double m = 0, v = 0;
    for (int i = 0; i < 8; ++i) m += xv[row * 8 + i] / 8;
    for (int i = 0; i < 8; ++i) v += (xv[row * 8 + i] - m) * (xv[row * 8 + i] - m) / 8;
    for (int i = 0; i < 8; ++i)
      ASSERT_NEAR(ov[row * 8 + i], (xv[row * 8 + i] - m) / std::sqrt(v + 1e-5) * wv[i] + bv[i],
                  1e-12);
  }
  EXPECT_THROW(layer_norm(x, {4}, Tensor(), Tensor(), 1e-5), InvalidArgument);
}

TEST(Norm, BatchNormTrainingUpdatesRunningStats) {
  // Values checked by hand against torch.nn.functional.batch_norm semantics.
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});  // N=2, C=2, L=2
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  BatchNormResult r = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  // channel 0: {1,2,5,6} mean 3.5, biased var 4.25, unbiased 17/3
  // channel 1: {3,4,7,8} mean 5.5, same variances.
  auto m = rm.to_vector<float>(), v = rv.to_vector<float>();
  EXPECT_NEAR(m[0], 0.35f, 1e-6);
  EXPECT_NEAR(m[1], 0.55f, 1e-6);
  EXPECT_NEAR(v[0], 0.9 + 0.1 * 17.0 / 3.0, 1e-6);
  auto o = r.out.to_vector<float>();
  EXPECT_NEAR(o[0], (1 - 3.5) / std::sqrt(4.25 + 1e-5), 1e-5);
  EXPECT_NEAR(o[7], (8 - 5.5) / std::sqrt(4.25 + 1e-5), 1e-5);
  // Eval uses the running statistics.
  BatchNormResult e = batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 1e-5);
  EXPECT_NEAR(e.out.to_vector<float>()[0], (1 - m[0]) / std::sqrt(v[0] + 1e-5), 1e-5);
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5),
               InvalidArgument);
  EXPECT_THROW(
      batch_norm(Tensor::ones({1, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
      InvalidArgument);
}

}  // namespace
}  // namespace cohort::native
