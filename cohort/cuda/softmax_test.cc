// Parity of native/softmax.h and native/loss.h's NLL loss on cuda:0 with the
// CPU: rows short (a warp each) and long (a block each), dims other than the
// last, forward and backward, every reduction and ignore_index, and autograd
// through log_softmax + nll_loss (the classifier's loss). float32 within
// 1e-5 relative: both sum the exponentials in double; the device's expf is
// within 2 ulp of glibc's.
#include "cohort/core/native/softmax.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/loss.h"
#include "cohort/cuda/pointwise_testing.h"

namespace cohort::cuda {
namespace {

using testing::gpu;
using testing::random_ints;
using testing::random_tensor;
using testing::same_values;

TEST(CudaSoftmax, ForwardAndBackwardAlongEveryDim) {
  COHORT_REQUIRE_CUDA();
  for (const Shape& shape : std::vector<Shape>{{64, 10}, {3, 5000}, {4, 7, 9}, {2, 1500, 3}}) {
    Tensor x = random_tensor(shape, 1, kFloat32, -6, 6);
    Tensor g = random_tensor(shape, 2);
    for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
      SCOPED_TRACE(shape_str(shape) + " dim " + std::to_string(dim));
      Tensor hs = native::softmax(x, dim), hl = native::log_softmax(x, dim);
      Tensor ds = native::softmax(x.to(gpu()), dim), dl = native::log_softmax(x.to(gpu()), dim);
      EXPECT_TRUE(same_values(ds, hs));
      EXPECT_TRUE(same_values(dl, hl));
      EXPECT_TRUE(same_values(native::softmax_backward(g.to(gpu()), ds, dim),
                              native::softmax_backward(g, hs, dim), 1e-5, 1e-6));
      EXPECT_TRUE(same_values(native::log_softmax_backward(g.to(gpu()), dl, dim),
                              native::log_softmax_backward(g, hl, dim), 1e-5, 1e-5));
    }
  }
  // float64 to double precision.
  Tensor x = random_tensor({6, 2000}, 3, kFloat64, -6, 6);
  EXPECT_TRUE(
      same_values(native::log_softmax(x.to(gpu()), 1), native::log_softmax(x, 1), 1e-12, 1e-12));
}

TEST(CudaSoftmax, Bfloat16ComputesInFloat) {
  COHORT_REQUIRE_CUDA();
  // The CPU has no bfloat16 math: its float32 result rounded to bfloat16,
  // within one bfloat16 ulp (2^-7 relative) where the float results sit
  // near a rounding boundary.
  Tensor x = random_tensor({16, 3000}, 10, kBFloat16, -6, 6);
  Tensor g = random_tensor({16, 3000}, 11, kBFloat16);
  Tensor hs = native::softmax(x.to(kFloat32), 1), hl = native::log_softmax(x.to(kFloat32), 1);
  Tensor ds = native::softmax(x.to(gpu()), 1), dl = native::log_softmax(x.to(gpu()), 1);
  ASSERT_EQ(ds.dtype(), kBFloat16);
  EXPECT_TRUE(same_values(ds, hs.to(kBFloat16), 1.0 / 128, 1e-6));
  EXPECT_TRUE(same_values(dl, hl.to(kBFloat16), 1.0 / 128, 1e-6));
  Tensor hb = native::log_softmax_backward(g.to(kFloat32), dl.to(kFloat32), 1).to(kBFloat16);
  EXPECT_TRUE(same_values(native::log_softmax_backward(g.to(gpu()), dl, 1), hb, 1.0 / 128, 1e-3));
}

TEST(CudaSoftmax, NllLossEveryReductionAndIgnoreIndex) {
  COHORT_REQUIRE_CUDA();
  Tensor logp = native::log_softmax(random_tensor({300, 10}, 4), 1);
  Tensor target = random_ints({300}, 5, 0, 10);
  std::vector<int64_t> t = target.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); i += 7) t[i] = -100;
  Tensor ignored = Tensor::from_vector(t);
  for (Reduction r : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    for (int64_t ignore : {native::kNoIgnoreIndex, int64_t{-100}}) {
      const Tensor& tg = ignore == -100 ? ignored : target;
      SCOPED_TRACE(std::to_string(static_cast<int>(r)) + " ignore " + std::to_string(ignore));
      Tensor h = native::nll_loss(logp, tg, r, ignore);
      Tensor d = native::nll_loss(logp.to(gpu()), tg.to(gpu()), r, ignore);
      EXPECT_TRUE(same_values(d, h));
      Tensor g = r == Reduction::kNone ? random_tensor({300}, 6) : Tensor::scalar(0.7);
      EXPECT_TRUE(same_values(
          native::nll_loss_backward(g.to(gpu()), logp.to(gpu()), tg.to(gpu()), r, ignore),
          native::nll_loss_backward(g, logp, tg, r, ignore)));
    }
  }
  // One sample ([C] scores, a 0-d target).
  Tensor one = logp.select(0, 3);
  Tensor t0 = Tensor::scalar(4.0, kInt64);
  EXPECT_TRUE(same_values(native::nll_loss(one.to(gpu()), t0.to(gpu()), Reduction::kNone),
                          native::nll_loss(one, t0, Reduction::kNone)));
  // All ignored: the mean is NaN on both.
  Tensor all = Tensor::full({300}, -100, kInt64);
  EXPECT_TRUE(same_values(native::nll_loss(logp.to(gpu()), all.to(gpu()), Reduction::kMean, -100),
                          native::nll_loss(logp, all, Reduction::kMean, -100)));
}

TEST(CudaSoftmax, ClassifierLossAutograd) {
  COHORT_REQUIRE_CUDA();
  Tensor logits = random_tensor({64, 10}, 7, kFloat32, -3, 3);
  Tensor target = random_ints({64}, 8, 0, 10);
  Tensor h = logits.clone().set_requires_grad(true);
  Tensor d = logits.to(gpu()).set_requires_grad(true);
  Tensor hl = cohort::nll_loss(cohort::log_softmax(h, 1), target);
  Tensor dl = cohort::nll_loss(cohort::log_softmax(d, 1), target.to(gpu()));
  EXPECT_TRUE(same_values(dl, hl));
  hl.backward();
  dl.backward();
  EXPECT_TRUE(same_values(d.grad(), h.grad(), 1e-5, 1e-7));
  // softmax's own backward through autograd.
  Tensor h2 = logits.clone().set_requires_grad(true);
  Tensor d2 = logits.to(gpu()).set_requires_grad(true);
  Tensor w = random_tensor({64, 10}, 9);
  Tensor hs = cohort::sum(cohort::mul(cohort::softmax(h2, 1), w));
  Tensor ds = cohort::sum(cohort::mul(cohort::softmax(d2, 1), w.to(gpu())));
  EXPECT_TRUE(same_values(ds, hs));
  hs.backward();
  ds.backward();
  EXPECT_TRUE(same_values(d2.grad(), h2.grad(), 1e-5, 1e-7));
}

}  // namespace
}  // namespace cohort::cuda
