// Parity of the CUDA flash attention (attention.cc, attention_kernels.cu)
// with cohort's CPU kernels through autograd: [B, H, T, D] operands (causal
// and not, T not a multiple of the tile, Tq != Tk, several head sizes),
// GPT's packed [B, T, 3C] form, and bfloat16 operands; and cuDNN's fused
// attention (cudnn_attention.h) against cohort's own kernel on the bf16
// causal shapes it takes, and the shapes it does not take still correct.
// The cuDNN tests were written without a GPU: compiled, not run.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/cudnn_attention.h"
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

// Switches the cuDNN path for its lifetime.
class CudnnSwitch {
 public:
  explicit CudnnSwitch(bool on) : was_(cudnn_attention_enabled()) {
    set_cudnn_attention_enabled(on);
  }
  ~CudnnSwitch() { set_cudnn_attention_enabled(was_); }

 private:
  bool was_;
};

std::vector<Tensor> sdpa_with(bool cudnn, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& g, bool causal) {
  CudnnSwitch s(cudnn);
  return sdpa_run(q, k, v, g, causal, cuda0());
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
  std::vector<Tensor> gpu = sdpa_with(false, q16, k16, v16, g16, true);  // the own kernel
  EXPECT_EQ(gpu[0].dtype(), kBFloat16);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(close(gpu[i], cpu[i], 1.0 / 128, i == 0 ? kOutAtol : 1e-3)) << i;
}

// cuDNN's bf16 kernels round P and dS to bf16 before their matmuls where the
// own kernel keeps float32: 2^-8 relative on each term of a sum of O(1)
// terms. Outputs: within 2 bf16 ulps of each other plus 1e-2; gradients
// (sums over T of dS terms, O(1) here) 3e-2.
constexpr double kBf16Rtol = 2.0 / 128, kBf16OutAtol = 1e-2, kBf16GradAtol = 3e-2;

TEST(CudaAttention, CudnnMatchesOwnKernelOnBf16Causal) {
  COHORT_REQUIRE_CUDA();
  struct Case {
    int64_t b, h, t, d;
  };
  // GPT-2's head size at a multiple of 64 and not, the largest head size,
  // and a tiny T.
  const std::vector<Case> cases = {{2, 4, 128, 64}, {1, 3, 70, 64}, {2, 2, 64, 128}, {1, 2, 8, 32}};
  uint64_t seed = 700;
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (const Case& c : cases) {
    Tensor q = native::to_bf16(random({c.b, c.h, c.t, c.d}, seed, -1, 1));
    Tensor k = native::to_bf16(random({c.b, c.h, c.t, c.d}, seed + 1, -1, 1));
    Tensor v = native::to_bf16(random({c.b, c.h, c.t, c.d}, seed + 2, -1, 1));
    Tensor g = native::to_bf16(random({c.b, c.h, c.t, c.d}, seed + 3, -1, 1));
    seed += 10;
    const SdpaCacheStats before = cudnn_sdpa_cache_stats();
    std::vector<Tensor> ref = sdpa_with(false, q, k, v, g, true);
    std::vector<Tensor> got = sdpa_with(true, q, k, v, g, true);
    const SdpaCacheStats after = cudnn_sdpa_cache_stats();
    // The forward and the backward each looked a plan up, and an engine
    // took both: the cuDNN path ran.
    EXPECT_EQ(after.hits + after.misses - before.hits - before.misses, 2) << c.t;
    EXPECT_EQ(after.no_engine, before.no_engine) << "no cuDNN engine for T " << c.t;
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(close(got[i], ref[i], kBf16Rtol, i == 0 ? kBf16OutAtol : kBf16GradAtol))
          << names[i] << " of B " << c.b << " H " << c.h << " T " << c.t << " D " << c.d;
  }
}

TEST(CudaAttention, CudnnPackedQkvMatchesOwnKernelAndHitsItsPlans) {
  COHORT_REQUIRE_CUDA();
  const int64_t b = 2, t = 96, nh = 4, c = 256;  // head_dim 64, GPT's layout
  Tensor qkv = native::to_bf16(random({b, t, 3 * c}, 720, -1, 1));
  Tensor g = native::to_bf16(random({b, t, c}, 721, -1, 1));
  auto run = [&](bool cudnn) {
    CudnnSwitch s(cudnn);
    Tensor x = qkv.to(cuda0());
    x.set_requires_grad(true);
    Tensor y = scaled_dot_product_attention_packed(x, nh, true);
    y.backward(g.to(cuda0()));
    return std::vector<Tensor>{y, x.grad()};
  };
  std::vector<Tensor> ref = run(false), first = run(true);
  const SdpaCacheStats warm = cudnn_sdpa_cache_stats();
  std::vector<Tensor> second = run(true);
  const SdpaCacheStats after = cudnn_sdpa_cache_stats();
  EXPECT_EQ(after.hits - warm.hits, 2);  // forward and backward plans reused
  EXPECT_EQ(after.misses, warm.misses);
  EXPECT_TRUE(close(first[0], ref[0], kBf16Rtol, kBf16OutAtol));
  EXPECT_TRUE(close(first[1], ref[1], kBf16Rtol, kBf16GradAtol));
  // One plan, one engine: the same bits on a rerun.
  EXPECT_TRUE(close(second[0], first[0], 0, 0));
}

// What cuDNN does not take runs the own kernel, still right against the CPU
// (bounds of Bf16OperandsComputeInFloat32), and looks no plan up.
TEST(CudaAttention, ShapesCudnnDoesNotTakeFallBackCorrectly) {
  COHORT_REQUIRE_CUDA();
  struct Case {
    int64_t tq, tk, d;
    bool causal;
  };
  const std::vector<Case> cases = {
      {50, 50, 64, false},  // not causal
      {40, 57, 64, true},   // q_len != kv_len
      {50, 50, 36, true},   // head_dim not a multiple of 8
      {1, 1, 64, true},     // one row
  };
  CudnnSwitch on(true);
  uint64_t seed = 740;
  auto f = [](const Tensor& t) { return native::bf16_to_float(t); };
  for (const Case& c : cases) {
    Tensor q16 = native::to_bf16(random({1, 2, c.tq, c.d}, seed, -1, 1));
    Tensor k16 = native::to_bf16(random({1, 2, c.tk, c.d}, seed + 1, -1, 1));
    Tensor v16 = native::to_bf16(random({1, 2, c.tk, c.d}, seed + 2, -1, 1));
    Tensor g16 = native::to_bf16(random({1, 2, c.tq, c.d}, seed + 3, -1, 1));
    seed += 10;
    const SdpaCacheStats before = cudnn_sdpa_cache_stats();
    std::vector<Tensor> gpu = sdpa_run(q16, k16, v16, g16, c.causal, cuda0());
    const SdpaCacheStats after = cudnn_sdpa_cache_stats();
    EXPECT_EQ(after.hits + after.misses, before.hits + before.misses) << c.tq << " " << c.d;
    std::vector<Tensor> cpu = sdpa_run(f(q16), f(k16), f(v16), f(g16), c.causal, kCPU);
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(close(gpu[i], cpu[i], 1.0 / 128, i == 0 ? kOutAtol : 1e-3))
          << i << " of Tq " << c.tq << " Tk " << c.tk << " D " << c.d;
  }
}

}  // namespace
}  // namespace cohort::cuda
