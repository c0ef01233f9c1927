// The bf16 PrecisionPolicy on CUDA (bf16_rows.cc, the bf16 products of
// gemm.cc, the device's bf16 conversions): linear, linear_gelu and
// linear_gelu_linear through autograd under PrecisionScope(bf16) on the GPU
// against the same on the CPU's emulated bf16 path, which is the same
// arithmetic (bf16 operands, exact products, float32 sums) in another order.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/dense_testing.h"

namespace cohort::cuda {
namespace {

using testing::close;
using testing::cuda0;
using testing::random;

// Outputs are float32 sums of exact bf16 products: 1e-5 relative. Gradients
// pass through values rounded to bf16 (dh, from pre16 = bf16(pre)), and pre
// differs in its last float32 bits between the devices, so now and then one
// such rounding goes the other way: one term off by a bf16 ulp (2^-7
// relative) in a sum of O(1) terms, hence 1/128 relative and 5e-3 absolute.
// linear_gelu's output also carries the GELU epilogue's tanh, which may be
// the hardware's approximation (about 2^-11 absolute: out moves by up to 3e-4
// |pre|): 1e-3 relative and absolute. linear_gelu_linear multiplies the bf16
// rounding of that output, and with out moved so, roundings go the other way
// now and then (a bf16 ulp, up to 2^-7 |out|, of a term of w2's sums, for
// its output and w2's gradient): 2e-2 there, still far below what a wrong
// operand, transpose or bias would give.
constexpr double kOutRtol = 1e-5, kOutAtol = 1e-5, kGradRtol = 1.0 / 128, kGradAtol = 5e-3;
constexpr double kGeluOutTol = 1e-3, kTwoLayerTol = 2e-2;

struct Layer {
  Tensor x, w1, b1, w2, b2, g;
};

// kind 0: linear, 1: linear_gelu, 2: linear_gelu_linear; out and the
// gradients of every input, under a bf16 policy.
std::vector<Tensor> run(const Layer& l, int kind, Device d) {
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  std::vector<Tensor> in = {l.x.to(d), l.w1.to(d), l.b1.to(d), l.w2.to(d), l.b2.to(d)};
  for (Tensor& t : in) t.set_requires_grad(true);
  Tensor y;
  if (kind == 0) y = linear(in[0], in[1], in[2]);
  if (kind == 1) y = linear_gelu(in[0], in[1], in[2]);
  if (kind == 2) y = linear_gelu_linear(in[0], in[1], in[2], in[3], in[4]);
  y.backward((kind == 2 ? l.g : l.g.narrow(-1, 0, l.w1.size(0))).to(d));
  std::vector<Tensor> out = {y};
  const int used = kind == 2 ? 5 : 3;
  for (int i = 0; i < used; ++i) out.push_back(in[i].grad());
  return out;
}

TEST(CudaBf16Policy, LinearLayersMatchTheCpuEmulatedPath) {
  COHORT_REQUIRE_CUDA();
  // Hidden width 64 (a multiple of 8: the GELU epilogue) and output 24.
  Layer l{random({3, 10, 32}, 700), random({64, 32}, 701, -0.5, 0.5),
          random({64}, 702),        random({24, 64}, 703, -0.5, 0.5),
          random({24}, 704),        random({3, 10, 64}, 705)};
  // linear_gelu_linear's gradient has the second layer's width.
  Layer l2 = l;
  l2.g = random({3, 10, 24}, 706);
  const char* kinds[] = {"linear", "linear_gelu", "linear_gelu_linear"};
  for (int kind = 0; kind < 3; ++kind) {
    const Layer& use = kind == 2 ? l2 : l;
    std::vector<Tensor> cpu = run(use, kind, kCPU), gpu = run(use, kind, cuda0());
    ASSERT_EQ(cpu.size(), gpu.size());
    EXPECT_EQ(gpu[0].dtype(), kFloat32);
    const double out_rtol = kind == 0 ? kOutRtol : kind == 1 ? kGeluOutTol : kTwoLayerTol;
    const double out_atol = kind == 0 ? kOutAtol : kind == 1 ? kGeluOutTol : kTwoLayerTol;
    const double grad_tol = kind == 2 ? kTwoLayerTol : kGradAtol;
    EXPECT_TRUE(close(gpu[0], cpu[0], out_rtol, out_atol)) << kinds[kind] << " out";
    for (size_t i = 1; i < cpu.size(); ++i) {
      EXPECT_EQ(gpu[i].dtype(), kFloat32) << "master gradients stay float32";
      EXPECT_TRUE(close(gpu[i], cpu[i], kGradRtol, grad_tol))
          << kinds[kind] << " gradient of input " << i - 1;
    }
  }
}

}  // namespace
}  // namespace cohort::cuda
