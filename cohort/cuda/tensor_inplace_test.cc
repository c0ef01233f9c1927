// Tensor's in-place members on cuda:0 against the CPU (they run the
// out-of-place device kernels and copy back), and a leaf gradient
// accumulated over two backward passes, which goes through add_.
#include "cohort/autograd/ops.h"
#include "cohort/cuda/pointwise_testing.h"

namespace cohort::cuda {
namespace {

using testing::gpu;
using testing::random_tensor;
using testing::same_values;

TEST(CudaInplace, MembersMatchTheCpu) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({6, 8}, 1, kFloat32, 0.5, 2);
  Tensor y = random_tensor({8}, 2, kFloat32, 0.5, 2);
  Tensor z = random_tensor({6, 8}, 3, kFloat32, 0.5, 2);
  Tensor h = x.clone(), d = x.to(gpu());
  // A strided view of each is updated, the rest must stay.
  auto run = [&](Tensor t, const Tensor& ty, const Tensor& tz) {
    Tensor v = t.narrow(1, 1, 6);
    v.add_(ty.narrow(0, 0, 6), 0.5).add_(0.25).mul_(ty.narrow(0, 2, 6)).mul_(1.5);
    v.div_(tz.narrow(1, 0, 6)).addcmul_(tz.narrow(1, 2, 6), tz.narrow(1, 1, 6), 0.1);
    v.addcdiv_(tz.narrow(1, 2, 6), tz.narrow(1, 1, 6), -0.2).sqrt_().clamp_(0.9, 1.6);
    t.add_(tz);
  };
  run(h, y, z);
  run(d, y.to(gpu()), z.to(gpu()));
  EXPECT_TRUE(same_values(d, h, 1e-5, 1e-6));
}

TEST(CudaInplace, GradientsAccumulateOverTwoBackwardPasses) {
  COHORT_REQUIRE_CUDA();
  Tensor w = random_tensor({5, 3}, 4);
  Tensor hw = w.clone().set_requires_grad(true);
  Tensor dw = w.to(gpu()).set_requires_grad(true);
  for (int pass = 0; pass < 2; ++pass) {
    cohort::sum(cohort::mul(hw, hw)).backward();
    cohort::sum(cohort::mul(dw, dw)).backward();
  }
  EXPECT_TRUE(same_values(dw.grad(), hw.grad()));
  dw.mutable_grad().zero_();
  EXPECT_TRUE(same_values(dw.grad(), Tensor::zeros({5, 3}), 0, 0));
}

}  // namespace
}  // namespace cohort::cuda
