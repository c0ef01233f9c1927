// Parity of the CUDA LayerNorm kernels (layer_norm.cc) with cohort's CPU
// ones: layer_norm and the fused residual add + LayerNorm, forward and
// gradients through autograd, float32 and bfloat16 activations.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/norm.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/dense_testing.h"

namespace cohort::cuda {
namespace {

using testing::close;
using testing::cuda0;
using testing::random;

// Row sums of a few hundred float32 terms in another order: 1e-5 relative,
// and an absolute 1e-5 for values that cancel to near zero (outputs and
// gradients here are O(1)).
constexpr double kRtol = 1e-5, kAtol = 1e-5;

TEST(CudaLayerNorm, ForwardAndGradientsMatchCpu) {
  COHORT_REQUIRE_CUDA();
  struct Case {
    Shape x, ns;
  };
  // GPT's [B, T, C]; a normalized_shape of two dims; rows shorter than a warp.
  const std::vector<Case> cases = {{{4, 7, 96}, {96}}, {{3, 6, 16}, {6, 16}}, {{10, 5}, {5}}};
  uint64_t seed = 400;
  for (const Case& c : cases) {
    // An offset mean, as residual streams have: the variance must not cancel.
    Tensor x = random(c.x, seed, 3, 7), w = random(c.ns, seed + 1, 0.5, 1.5);
    Tensor b = random(c.ns, seed + 2), g = random(c.x, seed + 3);
    seed += 10;
    auto run = [&](Device d) {
      Tensor xd = x.to(d), wd = w.to(d), bd = b.to(d);
      xd.set_requires_grad(true);
      wd.set_requires_grad(true);
      bd.set_requires_grad(true);
      Tensor y = layer_norm(xd, c.ns, wd, bd, 1e-5);
      y.backward(g.to(d));
      return std::vector<Tensor>{y, xd.grad(), wd.grad(), bd.grad()};
    };
    std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
    const char* names[] = {"out", "dx", "dweight", "dbias"};
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(close(gpu[i], cpu[i], kRtol, i < 2 ? kAtol : 1e-4))
          << names[i] << " of " << shape_str(c.x);
  }
}

TEST(CudaLayerNorm, StatisticsAreFloat32AndMatch) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({6, 64}, 410, -4, 4);
  native::LayerNormResult want = native::layer_norm(x, {64}, Tensor(), Tensor(), 1e-5);
  native::LayerNormResult got = native::layer_norm(x.to(cuda0()), {64}, Tensor(), Tensor(), 1e-5);
  EXPECT_EQ(got.mean.dtype(), kFloat32);
  EXPECT_TRUE(close(got.mean, want.mean, kRtol, 1e-6));
  EXPECT_TRUE(close(got.rstd, want.rstd, kRtol, 1e-6));
  EXPECT_TRUE(close(got.out, want.out, kRtol, kAtol));
}

TEST(CudaLayerNorm, AddLayerNormMatchesCpu) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({2, 9, 80}, 420), delta = random({2, 9, 80}, 421);
  Tensor w = random({80}, 422, 0.5, 1.5), b = random({80}, 423), g = random({2, 9, 80}, 424);
  auto run = [&](Device d) {
    Tensor xd = x.to(d), dd = delta.to(d), wd = w.to(d), bd = b.to(d);
    for (Tensor* t : {&xd, &dd, &wd, &bd}) t->set_requires_grad(true);
    auto [s, y] = add_layer_norm(xd, dd, wd, bd, 1e-5);
    y.backward(g.to(d));
    return std::vector<Tensor>{s, y, xd.grad(), dd.grad(), wd.grad(), bd.grad()};
  };
  std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
  const char* names[] = {"sum", "out", "dx", "ddelta", "dweight", "dbias"};
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(close(gpu[i], cpu[i], kRtol, i < 4 ? kAtol : 1e-4)) << names[i];
}

TEST(CudaLayerNorm, Bf16ActivationsWithFloat32Statistics) {
  COHORT_REQUIRE_CUDA();
  Tensor x16 = native::to_bf16(random({5, 3, 128}, 430, -3, 3));
  Tensor d16 = native::to_bf16(random({5, 3, 128}, 431));
  Tensor g16 = native::to_bf16(random({5, 3, 128}, 432));
  Tensor w = random({128}, 433, 0.5, 1.5), b = random({128}, 434);
  // The CPU on the widened values: the device computes the same in float32
  // and rounds out, sum and dx to bf16: within one bf16 ulp (8 significant
  // bits: at most 2^-7 relative).
  Tensor s = native::bf16_to_float(native::to_bf16(
      native::bf16_to_float(x16).add(native::bf16_to_float(d16))));  // the sum, as stored
  native::LayerNormResult want = native::layer_norm(s, {128}, w, b, 1e-5);
  native::AddLayerNormResult got =
      native::add_layer_norm(x16.to(cuda0()), d16.to(cuda0()), w.to(cuda0()), b.to(cuda0()), 1e-5);
  EXPECT_EQ(got.sum.dtype(), kBFloat16);
  EXPECT_EQ(got.norm.out.dtype(), kBFloat16);
  EXPECT_TRUE(close(got.sum, s, 0, 0));
  EXPECT_TRUE(close(got.norm.out, want.out, 1.0 / 128, kAtol));
  native::LayerNormGrads gw = native::layer_norm_backward(
      native::bf16_to_float(g16), s, {128}, want.mean, want.rstd, w, true, true, true);
  native::LayerNormGrads gg =
      native::layer_norm_backward(g16.to(cuda0()), got.sum, {128}, got.norm.mean, got.norm.rstd,
                                  w.to(cuda0()), true, true, true);
  EXPECT_EQ(gg.dx.dtype(), kBFloat16);
  EXPECT_EQ(gg.dweight.dtype(), kFloat32);
  EXPECT_TRUE(close(gg.dx, gw.dx, 1.0 / 128, 1e-4));
  EXPECT_TRUE(close(gg.dweight, gw.dweight, kRtol, 1e-4));
  EXPECT_TRUE(close(gg.dbias, gw.dbias, kRtol, 1e-4));
}

}  // namespace
}  // namespace cohort::cuda
