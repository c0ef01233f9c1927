// Parity of the CUDA flash attention (attention.cc, attention_kernels.cu)
// with cohort's CPU kernels through autograd: [B, H, T, D] operands (causal
// and not, T not a multiple of the tile, Tq != Tk, several head sizes),
// GPT's packed [B, T, 3C] form, and bfloat16 operands.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/dense_testing.h"

namespace cohort::cuda {
namespace {

using testing::close;
using testing::cuda0;
using testing::random;

// Outputs: float32 sums over the keys in another order (1e-5 relative and
// absolute, outputs are O(1)). Gradients: dS = P (dP - delta) cancels (delta
// is P's mean of dP), so their rounding is relative to |dP|, not to the
// result: an absolute 5e-5.
constexpr double kRtol = 1e-5, kOutAtol = 1e-5, kGradAtol = 5e-5;

// out, dq, dk, dv of attention on `d`.
std::vector<Tensor> sdpa_run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             bool causal, Device d) {
  Tensor qd = q.to(d), kd = k.to(d), vd = v.to(d);
  for (Tensor* t : {&qd, &kd, &vd}) t->set_requires_grad(true);
  Tensor y = scaled_dot_product_attention(qd, kd, vd, causal);
  y.backward(g.to(d));
  return {y, qd.grad(), kd.grad(), vd.grad()};
}

TEST(CudaAttention, MatchesCpuForwardAndBackward) {
  COHORT_REQUIRE_CUDA();
  struct Case {
    int64_t b, h, tq, tk, d;
    bool causal;
  };
  const std::vector<Case> cases = {
      {2, 3, 70, 70, 64, true},   // GPT-2's head size, T past two tiles
      {1, 2, 33, 50, 64, false},  // cross attention, Tq != Tk
      {1, 2, 40, 57, 32, true},   // causal with Tq < Tk (top-left alignment)
      {2, 1, 17, 17, 80, true},   // a head size between the compiled ones
      {1, 1, 1, 1, 16, true},     // one row
  };
  uint64_t seed = 600;
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (const Case& c : cases) {
    Tensor q = random({c.b, c.h, c.tq, c.d}, seed, -1, 1);
    Tensor k = random({c.b, c.h, c.tk, c.d}, seed + 1, -1, 1);
    Tensor v = random({c.b, c.h, c.tk, c.d}, seed + 2, -1, 1);
    Tensor g = random({c.b, c.h, c.tq, c.d}, seed + 3, -1, 1);
    seed += 10;
    std::vector<Tensor> cpu = sdpa_run(q, k, v, g, c.causal, kCPU);
    std::vector<Tensor> gpu = sdpa_run(q, k, v, g, c.causal, cuda0());
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(close(gpu[i], cpu[i], kRtol, i == 0 ? kOutAtol : kGradAtol))
          << names[i] << " of Tq " << c.tq << " Tk " << c.tk << " D " << c.d
          << (c.causal ? " causal" : "");
  }
}

TEST(CudaAttention, StridedHeadViewsNeedNoCopy) {
  COHORT_REQUIRE_CUDA();
  // q as the [B, H, T, D] view of a [B, T, H, D] tensor (GPT's transpose).
  Tensor q = random({2, 45, 4, 32}, 650, -1, 1), k = random({2, 4, 45, 32}, 651, -1, 1);
  Tensor v = random({2, 4, 45, 32}, 652, -1, 1), g = random({2, 4, 45, 32}, 653, -1, 1);
  auto run = [&](Device d) {
    Tensor qd = q.to(d), kd = k.to(d), vd = v.to(d);
    for (Tensor* t : {&qd, &kd, &vd}) t->set_requires_grad(true);
    Tensor y = scaled_dot_product_attention(transpose(qd, 1, 2), kd, vd, true);
    y.backward(g.to(d));
    return std::vector<Tensor>{y, qd.grad(), kd.grad(), vd.grad()};
  };
  std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(close(gpu[i], cpu[i], kRtol, i == 0 ? kOutAtol : kGradAtol)) << i;
}

TEST(CudaAttention, PackedQkvMatchesCpu) {
  COHORT_REQUIRE_CUDA();
  const int64_t b = 2, t = 45, nh = 2, c = 128;  // head_dim 64
  Tensor qkv = random({b, t, 3 * c}, 660, -1, 1), g = random({b, t, c}, 661, -1, 1);
  auto run = [&](Device d) {
    Tensor x = qkv.to(d);
    x.set_requires_grad(true);
    Tensor y = scaled_dot_product_attention_packed(x, nh, true);
    y.backward(g.to(d));
    return std::vector<Tensor>{y, x.grad()};
  };
  std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
  EXPECT_TRUE(close(gpu[0], cpu[0], kRtol, kOutAtol));
  EXPECT_TRUE(close(gpu[1], cpu[1], kRtol, kGradAtol));
}

TEST(CudaAttention, Bf16OperandsComputeInFloat32) {
  COHORT_REQUIRE_CUDA();
  Tensor q16 = native::to_bf16(random({1, 2, 50, 64}, 670, -1, 1));
  Tensor k16 = native::to_bf16(random({1, 2, 50, 64}, 671, -1, 1));
  Tensor v16 = native::to_bf16(random({1, 2, 50, 64}, 672, -1, 1));
  Tensor g16 = native::to_bf16(random({1, 2, 50, 64}, 673, -1, 1));
  auto f = [](const Tensor& t) { return native::bf16_to_float(t); };
  // The CPU in float32 on the same values; the device rounds its float32
  // results to bf16 at the end: within one bf16 ulp (8 significant bits: at
  // most 2^-7 relative) of float32 results that agree to 1e-5. Gradients
  // also see delta = rowsum(dout * out) taken from the bf16-rounded output
  // (as flash attention's bf16 kernels do): an error of about 2^-9 |dout|
  // |out| sqrt(D) per row, through dS into dq and dk, about 1e-4 here, so an
  // absolute 1e-3.
  std::vector<Tensor> cpu = sdpa_run(f(q16), f(k16), f(v16), f(g16), true, kCPU);
  std::vector<Tensor> gpu = sdpa_run(q16, k16, v16, g16, true, cuda0());
  EXPECT_EQ(gpu[0].dtype(), kBFloat16);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(close(gpu[i], cpu[i], 1.0 / 128, i == 0 ? kOutAtol : 1e-3)) << i;
}

}  // namespace
}  // namespace cohort::cuda
