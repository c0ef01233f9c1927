// Why bf16 training keeps float32 master weights (autograd/precision.h): a
// weight of 1.0 updated by lr * g = 1e-3 a hundred times. Stored in bf16 with
// round-to-nearest, every update is under half a bf16 step at 1.0 (2^-9) and
// is lost: the weight never moves. As a float32 parameter (what SGD updates
// while the forward and backward run in bf16) it moves to about 0.9.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/optim/sgd.h"

namespace cohort::optim {
namespace {

TEST(MasterWeights, Float32MasterKeepsUpdatesThatBf16RoundingLoses) {
  const int steps = 100;
  const double lr = 1e-3;
  // bf16 weights with round-to-nearest-even updates.
  BFloat16 w16(1.0f);
  for (int i = 0; i < steps; ++i) {
    const float g = 1.0f;
    w16 = BFloat16(static_cast<float>(w16) - static_cast<float>(lr) * g);
  }
  EXPECT_EQ(static_cast<float>(w16), 1.0f);

  // float32 master weight, trained under the bf16 policy: y = x w^T with
  // x = 1, loss = y, so d loss / d w = 1 (exact in bf16).
  Tensor w = Tensor::full({1, 1}, 1.0).set_requires_grad(true);
  Tensor x = Tensor::full({1, 1}, 1.0);
  SGD sgd({w}, SGDOptions{lr});
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    sum(linear(x, w)).backward();
    ASSERT_EQ(w.grad().dtype(), kFloat32);
    sgd.step();
  }
  const float moved = w.detach().to_vector<float>()[0];
  EXPECT_EQ(w.dtype(), kFloat32);
  EXPECT_NEAR(moved, 1.0 - steps * lr, 1e-5);
  // And what the next bf16 forward multiplies has moved too.
  EXPECT_LT(static_cast<float>(BFloat16(moved)), 0.91f);
}

}  // namespace
}  // namespace cohort::optim
