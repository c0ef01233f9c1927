// Parity of the CUDA cross-entropy (cross_entropy.cc) with cohort's CPU
// kernels: loss under each reduction, ignored rows, bfloat16 logits, and the
// gradient through autograd.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/core/kernels/cross_entropy.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/dense_testing.h"

namespace cohort::cuda {
namespace {

using testing::close;
using testing::cuda0;
using testing::random;

Tensor targets(int64_t n, int64_t c, uint64_t seed, int64_t ignore_every = 0) {
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = ignore_every && i % ignore_every == 0 ? -100 : (i * 7919 + seed * 31) % c;
  return Tensor::from_vector(t, {n});
}

// Log-sum-exp over up to a thousand classes in float32, in another order: a
// few ulps of values around log(c) + max.
constexpr double kRtol = 1e-5, kAtol = 1e-5;

TEST(CudaCrossEntropy, LossUnderEachReduction) {
  COHORT_REQUIRE_CUDA();
  // Vocabulary-sized rows (more than a block's threads) and tiny ones.
  for (int64_t c : {1000, 5}) {
    Tensor x = random({37, c}, 500 + c, -8, 8);
    Tensor t = targets(37, c, c, /*ignore_every=*/5);
    for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
      kernels::CrossEntropyResult want = kernels::cross_entropy(x, t, red, -100);
      kernels::CrossEntropyResult got =
          kernels::cross_entropy(x.to(cuda0()), t.to(cuda0()), red, -100);
      EXPECT_TRUE(close(got.loss, want.loss, kRtol, kAtol)) << "classes " << c;
      EXPECT_TRUE(close(got.lse, want.lse, kRtol, kAtol)) << "classes " << c;
    }
  }
}

TEST(CudaCrossEntropy, EveryRowIgnoredGivesNanMean) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({4, 10}, 510);
  Tensor t = Tensor::from_vector(std::vector<int64_t>{-100, -100, -100, -100}, {4});
  Tensor got = kernels::cross_entropy(x.to(cuda0()), t.to(cuda0()), Reduction::kMean, -100).loss;
  EXPECT_TRUE(std::isnan(got.item<float>()));
}

TEST(CudaCrossEntropy, GradientThroughAutograd) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({24, 300}, 520, -6, 6);
  Tensor t = targets(24, 300, 3, /*ignore_every=*/7).to(kInt32);
  for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    auto run = [&](Device d) {
      Tensor xd = x.to(d);
      xd.set_requires_grad(true);
      Tensor loss = cross_entropy(xd, t.to(d), red, -100);
      if (red == Reduction::kNone)
        loss.backward(random({24}, 521).to(d));
      else
        loss.backward();
      return std::vector<Tensor>{loss, xd.grad()};
    };
    std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
    EXPECT_TRUE(close(gpu[0], cpu[0], kRtol, kAtol));
    // Softmax probabilities from exp(x - lse): 1e-5 relative of each, and of
    // the probability 1 at most.
    EXPECT_TRUE(close(gpu[1], cpu[1], kRtol, 1e-6));
  }
}

TEST(CudaCrossEntropy, Bf16LogitsAccumulateInFloat32) {
  COHORT_REQUIRE_CUDA();
  Tensor x16 = native::to_bf16(random({16, 777}, 530, -5, 5));
  Tensor t = targets(16, 777, 4);
  Tensor x = native::bf16_to_float(x16);  // the same values, float32 on the CPU
  kernels::CrossEntropyResult want = kernels::cross_entropy(x, t, Reduction::kMean, -100);
  kernels::CrossEntropyResult got =
      kernels::cross_entropy(x16.to(cuda0()), t.to(cuda0()), Reduction::kMean, -100);
  EXPECT_EQ(got.loss.dtype(), kFloat32);
  EXPECT_TRUE(close(got.loss, want.loss, kRtol, kAtol));
  Tensor g = Tensor::scalar(1.0);
  Tensor dwant = kernels::cross_entropy_backward(g, x, t, want.lse, Reduction::kMean, -100);
  Tensor dgot = kernels::cross_entropy_backward(g.to(cuda0()), x16.to(cuda0()), t.to(cuda0()),
                                                got.lse, Reduction::kMean, -100);
  EXPECT_EQ(dgot.dtype(), kBFloat16);
  // Rounded to bf16 at the end: within one bf16 ulp (8 significant bits: at
  // most 2^-7 relative).
  EXPECT_TRUE(close(dgot, dwant, 1.0 / 128, 1e-7));
}

}  // namespace
}  // namespace cohort::cuda
