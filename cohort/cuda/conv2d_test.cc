// Parity of conv2d (cuDNN, conv2d.cc) and max_pool2d (pool2d_kernels.cu) on
// CUDA with cohort's CPU kernels, forward and gradients through autograd.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "cohort/autograd/ops.h"
#include "cohort/cuda/conv2d_plan.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/dense_testing.h"

namespace cohort::cuda {
namespace {

using testing::close;
using testing::cuda0;
using testing::random;

struct ConvCase {
  Shape x, w;
  std::array<int64_t, 2> stride, padding;
  bool bias, relu;
};

// Values and gradients of (relu) conv2d on `d`: out, dx, dw, db.
std::vector<Tensor> conv_run(const ConvCase& c, Device d, uint64_t seed) {
  Tensor x = random(c.x, seed).to(d), w = random(c.w, seed + 1, -0.5, 0.5).to(d);
  Tensor b = c.bias ? random({c.w[0]}, seed + 2).to(d) : Tensor();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (b.defined()) b.set_requires_grad(true);
  Tensor y =
      c.relu ? conv2d_relu(x, w, b, c.stride, c.padding) : conv2d(x, w, b, c.stride, c.padding);
  y.backward(random(y.sizes(), seed + 3).to(d));
  return {y, x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

TEST(CudaConv2d, ForwardAndGradientsMatchCpu) {
  COHORT_REQUIRE_CUDA();
  const std::vector<ConvCase> cases = {
      {{2, 3, 12, 12}, {8, 3, 5, 5}, {1, 1}, {0, 0}, true, false},  // Net's first layer
      {{4, 6, 9, 11}, {5, 6, 3, 3}, {2, 1}, {1, 1}, true, true},    // strides, padding, ReLU
      {{1, 2, 7, 7}, {3, 2, 1, 1}, {1, 1}, {0, 0}, false, false},   // 1x1, no bias
  };
  uint64_t seed = 100;
  for (const ConvCase& c : cases) {
    std::vector<Tensor> cpu = conv_run(c, kCPU, seed), gpu = conv_run(c, cuda0(), seed);
    seed += 10;
    // Sums of up to Cin*kh*kw = 75 (forward, dx) or N*H*W = 288 (dw, db)
    // products of magnitude < 2: a different order moves them by a few
    // float32 ulps of the sum of |terms|, well inside 1e-5 relative + 1e-4.
    const char* names[] = {"out", "dx", "dw", "db"};
    for (int i = 0; i < 4; ++i) {
      if (!cpu[i].defined()) continue;
      EXPECT_TRUE(close(gpu[i], cpu[i], 1e-5, 1e-4))
          << names[i] << " of x " << shape_str(c.x) << " w " << shape_str(c.w);
    }
  }
}

// A second identical convolution (forward and backward) reuses its
// descriptors and algorithms: every lookup hits, none misses.
TEST(CudaConv2d, SecondIdenticalCallHitsThePlanCache) {
  COHORT_REQUIRE_CUDA();
  const ConvCase c{{2, 3, 10, 10}, {4, 3, 3, 3}, {1, 1}, {1, 1}, true, false};
  std::vector<Tensor> first = conv_run(c, cuda0(), 400);
  const PlanCacheStats before = conv2d_plan_cache_stats();
  std::vector<Tensor> second = conv_run(c, cuda0(), 400);
  const PlanCacheStats after = conv2d_plan_cache_stats();
  EXPECT_EQ(after.misses, before.misses);
  // forward, backward data, backward filter, backward bias.
  EXPECT_EQ(after.hits, before.hits + 4);
  // The kept algorithm is the one chosen first: the same bits.
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(close(second[i], first[i], 0, 0)) << i;
}

TEST(CudaMaxPool2d, ForwardArgmaxAndGradientMatchCpu) {
  COHORT_REQUIRE_CUDA();
  struct PoolCase {
    Shape x;
    std::array<int64_t, 2> kernel, stride, padding;
  };
  const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0}},   // Net's
      {{1, 4, 9, 7}, {3, 3}, {2, 2}, {1, 1}},   // overlapping windows, padding
      {{2, 2, 6, 10}, {3, 2}, {1, 3}, {1, 0}},  // rectangular
  };
  uint64_t seed = 200;
  for (const PoolCase& c : cases) {
    // Small integers: many ties, which must go to the first element as on
    // the CPU (the gradient shows where they went).
    std::vector<double> v = random(c.x, seed++, -3, 3, kFloat64).to_vector<double>();
    for (double& e : v) e = std::floor(e);
    Tensor xi = Tensor::from_vector(v, c.x).to(kFloat32);
    auto run = [&](Device d) {
      Tensor xd = xi.to(d);
      xd.set_requires_grad(true);
      Tensor y = max_pool2d(xd, c.kernel, c.stride, c.padding);
      y.backward(random(y.sizes(), seed).to(d));
      return std::vector<Tensor>{y, xd.grad()};
    };
    std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
    // The same maxima and the same additions in the same order: equal bits.
    EXPECT_TRUE(close(gpu[0], cpu[0], 0, 0)) << "out of " << shape_str(c.x);
    EXPECT_TRUE(close(gpu[1], cpu[1], 0, 0)) << "dx of " << shape_str(c.x);
    ++seed;
  }
}

TEST(CudaMaxPool2d, NanWinsItsWindow) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({1, 1, 4, 4}, 300);
  std::vector<float> v = x.to_vector<float>();
  v[5] = NAN;  // row 1, column 1: window (0, 0) of a 2x2 pooling
  x = Tensor::from_vector(v, {1, 1, 4, 4});
  Tensor got = max_pool2d(x.to(cuda0()), 2).cpu();
  EXPECT_TRUE(std::isnan(got.to_vector<float>()[0]));
  EXPECT_TRUE(close(got, max_pool2d(x, 2), 0, 0));
}

}  // namespace
}  // namespace cohort::cuda
