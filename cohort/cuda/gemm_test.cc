// Parity of the cuBLASLt products (gemm.cc) and linear + GELU (gelu.cc) with
// cohort's CPU kernels: forward values and, through autograd, gradients.
// Tolerances of products scale with |a| |b| (the sum of |terms| of each dot
// product), the bound a different summation order can move a float32 result
// by, times a few units of rounding.
#include <gtest/gtest.h>

#include "cohort/autograd/ops.h"
#include "cohort/core/kernels/bf16_rows.h"
#include "cohort/core/kernels/gelu.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/reduce.h"
#include "cohort/cuda/cuda_testing.h"
#include "cohort/cuda/dense_testing.h"
#include "cohort/cuda/gemm.h"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

using testing::close;
using testing::cuda0;
using testing::random;

// |a| |b| (batched as matmul), the scale of a product's rounding error.
Tensor product_scale(const Tensor& a, const Tensor& b) {
  return native::matmul(a.to(kFloat64).abs(), b.to(kFloat64).abs());
}

TEST(CudaGemm, MmMatchesCpu) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random({37, 65}, 1), b = random({65, 29}, 2);
  Tensor want = native::mm(a, b);
  EXPECT_TRUE(
      close(native::mm(a.to(cuda0()), b.to(cuda0())), want, 1e-5, 1e-6, product_scale(a, b)));
}

TEST(CudaGemm, MmTransposedViewsNeedNoCopy) {
  COHORT_REQUIRE_CUDA();
  // a^T and b^T stored transposed: each operand reaches cuBLASLt as a view.
  Tensor at = random({65, 37}, 3), bt = random({29, 65}, 4);
  Tensor a = at.transpose(0, 1), b = bt.transpose(0, 1);
  Tensor want = native::mm(a, b);
  Tensor got = native::mm(at.to(cuda0()).transpose(0, 1), bt.to(cuda0()).transpose(0, 1));
  EXPECT_TRUE(close(got, want, 1e-5, 1e-6, product_scale(a, b)));
}

TEST(CudaGemm, MmFloat64) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random({17, 40}, 5, -2, 2, kFloat64), b = random({40, 23}, 6, -2, 2, kFloat64);
  EXPECT_TRUE(close(native::mm(a.to(cuda0()), b.to(cuda0())), native::mm(a, b), 1e-13, 1e-14,
                    product_scale(a, b)));
}

TEST(CudaGemm, MatmulBroadcastsBatchesAndVectors) {
  COHORT_REQUIRE_CUDA();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 5, 7}, {7, 4}},     // a batched, b one matrix for all (batch stride 0)
      {{5, 7}, {3, 7, 4}},        // the other way round
      {{2, 1, 5, 7}, {3, 7, 4}},  // both broadcast
      {{3, 5, 7}, {3, 7, 4}},     // equal batches
      {{7}, {3, 7, 4}},           // vector x batch
      {{3, 5, 7}, {7}},           // batch x vector
      {{7}, {7}},                 // dot product
  };
  uint64_t seed = 10;
  for (const auto& [sa, sb] : cases) {
    Tensor a = random(sa, seed++), b = random(sb, seed++);
    Tensor want = native::matmul(a, b);
    EXPECT_TRUE(
        close(native::matmul(a.to(cuda0()), b.to(cuda0())), want, 1e-5, 1e-6, product_scale(a, b)))
        << shape_str(sa) << " x " << shape_str(sb);
  }
}

TEST(CudaGemm, LinearWithAndWithoutBias) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({4, 6, 32}, 20), w = random({24, 32}, 21), b = random({24}, 22);
  Tensor scale = product_scale(x, w.transpose(0, 1)).add(b.to(kFloat64).abs());
  EXPECT_TRUE(close(native::linear(x.to(cuda0()), w.to(cuda0()), b.to(cuda0())),
                    native::linear(x, w, b), 1e-5, 1e-6, scale));
  EXPECT_TRUE(close(native::linear(x.to(cuda0()), w.to(cuda0()), Tensor()),
                    native::linear(x, w, Tensor()), 1e-5, 1e-6, scale));
}

TEST(CudaGemm, Tf32OnlyWhenAllowed) {
  COHORT_REQUIRE_CUDA();
  // Inputs with low bits set: TF32 (10-bit mantissa) visibly changes the
  // product, float32 does not. Big enough for cuBLASLt to take tensor cores.
  Tensor a = random({128, 512}, 30), b = random({512, 128}, 31);
  Tensor scale = product_scale(a, b);
  Tensor want = native::mm(a, b);
  ASSERT_FALSE(native::allow_tf32());
  Tensor strict = native::mm(a.to(cuda0()), b.to(cuda0()));
  EXPECT_TRUE(close(strict, want, 1e-5, 1e-6, scale));
  native::set_allow_tf32(true);
  Tensor fast = native::mm(a.to(cuda0()), b.to(cuda0()));
  native::set_allow_tf32(false);
  // TF32 rounds each input to 11 significant bits: each product is off by up
  // to about 2^-10 of |a b|.
  EXPECT_TRUE(close(fast, want, 2e-3, 1e-6, scale));
  EXPECT_FALSE(close(fast, want, 1e-5, 1e-6, scale)) << "TF32 was expected to round the inputs";
}

TEST(CudaGemm, Bf16ProductsAccumulateInFloat32) {
  COHORT_REQUIRE_CUDA();
  Tensor a16 = native::to_bf16(random({33, 72}, 40)), b16 = native::to_bf16(random({72, 18}, 41));
  // Products of bf16 values are exact in float32: the CPU's emulated path is
  // the same computation up to summation order.
  Tensor want = native::mm_bf16(a16, b16, native::Bf16Path::kEmulated);
  Tensor scale = product_scale(native::bf16_to_float(a16), native::bf16_to_float(b16));
  Tensor got = native::mm_bf16(a16.to(cuda0()), b16.to(cuda0()), native::Bf16Path::kEmulated);
  EXPECT_EQ(got.dtype(), kFloat32);
  EXPECT_TRUE(close(got, want, 1e-5, 1e-6, scale));

  Tensor x16 = native::to_bf16(random({2, 9, 72}, 42)), w16 = native::to_bf16(random({40, 72}, 43));
  Tensor bias = random({40}, 44);
  Tensor lw = native::linear_bf16(x16, w16, bias, native::Bf16Path::kEmulated);
  Tensor lg = native::linear_bf16(x16.to(cuda0()), w16.to(cuda0()), bias.to(cuda0()),
                                  native::Bf16Path::kEmulated);
  Tensor lscale =
      product_scale(native::bf16_to_float(x16), native::bf16_to_float(w16).transpose(0, 1))
          .add(bias.to(kFloat64).abs());
  EXPECT_TRUE(close(lg, lw, 1e-5, 1e-6, lscale));

  Tensor p16 = native::to_bf16(random({3, 5, 72}, 45));
  Tensor mw = native::matmul_bf16(p16, b16, native::Bf16Path::kEmulated);
  Tensor mg = native::matmul_bf16(p16.to(cuda0()), b16.to(cuda0()), native::Bf16Path::kEmulated);
  EXPECT_TRUE(close(mg, mw, 1e-5, 1e-6,
                    product_scale(native::bf16_to_float(p16), native::bf16_to_float(b16))));
}

// Forward and gradients of linear through autograd, device against CPU.
TEST(CudaGemm, LinearGradients) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({5, 3, 16}, 50), w = random({12, 16}, 51), b = random({12}, 52);
  Tensor g = random({5, 3, 12}, 53);
  auto run = [&](Device d) {
    Tensor xd = x.to(d), wd = w.to(d), bd = b.to(d);
    xd.set_requires_grad(true);
    wd.set_requires_grad(true);
    bd.set_requires_grad(true);
    Tensor y = linear(xd, wd, bd);
    y.backward(g.to(d));
    return std::vector<Tensor>{y, xd.grad(), wd.grad(), bd.grad()};
  };
  std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
  // Sums over 16 (forward, dx), 12 (dx) and 15 rows (dw, db) of terms |.| < 4:
  // a bound of 1e-5 relative to their magnitude plus that absolute slack.
  const char* names[] = {"out", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(close(gpu[i], cpu[i], 1e-5, 1e-4)) << names[i];
}

// The padded fallback (gemm_padded), forced: bf16 x w^T with odd leading
// dimensions everywhere (k = 51, an odd vocabulary of 1001), and a batched
// float32 product with an odd k, each against the CPU.
TEST(CudaGemm, PaddedFallbackMatchesCpu) {
  COHORT_REQUIRE_CUDA();
  Tensor x16 = native::to_bf16(random({37, 51}, 90)), w16 = native::to_bf16(random({1001, 51}, 91));
  Tensor want = native::linear_bf16(x16, w16, Tensor(), native::Bf16Path::kEmulated);
  Tensor xd = x16.to(cuda0()), wd = w16.to(cuda0());
  Tensor out = Tensor::empty({37, 1001}, kFloat32, cuda0());
  GemmCall c;
  c.op = "padded bf16";
  c.ab = kBFloat16;
  c.c = kFloat32;
  c.m = 37;
  c.n = 1001;
  c.k = 51;
  c.a = gemm_operand(xd);
  c.b = gemm_operand(wd);
  c.b.trans = !c.b.trans;
  c.c_data = out.device_data();
  c.ldc = 1001;
  gemm_padded(cuda0(), c);
  Tensor scale =
      product_scale(native::bf16_to_float(x16), native::bf16_to_float(w16).transpose(0, 1));
  EXPECT_TRUE(close(out, want, 1e-5, 1e-6, scale));

  Tensor a = random({3, 5, 7}, 92), b = random({3, 7, 9}, 93);
  Tensor ad = a.to(cuda0()), bd = b.to(cuda0());
  Tensor got = Tensor::empty({3, 5, 9}, kFloat32, cuda0());
  GemmCall f;
  f.op = "padded float32";
  f.m = 5;
  f.n = 9;
  f.k = 7;
  f.batch = 3;
  f.a = gemm_operand(ad);
  f.b = gemm_operand(bd);
  f.c_data = got.device_data();
  f.ldc = 9;
  f.c_batch_stride = 45;
  gemm_padded(cuda0(), f);
  EXPECT_TRUE(close(got, native::matmul(a, b), 1e-5, 1e-6, product_scale(a, b)));
}

// An untied GPT-2 vocabulary (50257 words) in bf16 through the public ops:
// whichever path cuBLASLt takes (its own or the padded one), the CPU's.
TEST(CudaGemm, Bf16OddVocabularyMatchesCpu) {
  COHORT_REQUIRE_CUDA();
  Tensor x16 = native::to_bf16(random({8, 64}, 94));
  Tensor w16 = native::to_bf16(random({50257, 64}, 95, -0.5, 0.5));
  Tensor want = native::linear_bf16(x16, w16, Tensor(), native::Bf16Path::kEmulated);
  Tensor got =
      native::linear_bf16(x16.to(cuda0()), w16.to(cuda0()), Tensor(), native::Bf16Path::kEmulated);
  Tensor scale =
      product_scale(native::bf16_to_float(x16), native::bf16_to_float(w16).transpose(0, 1));
  EXPECT_TRUE(close(got, want, 1e-5, 1e-6, scale));
  // dx = dy w: dy [8, 50257] bf16, the odd leading dimension on A.
  Tensor dy16 = native::to_bf16(random({8, 50257}, 96));
  Tensor dwant = native::mm_bf16(dy16, w16, native::Bf16Path::kEmulated);
  Tensor dgot = native::mm_bf16(dy16.to(cuda0()), w16.to(cuda0()), native::Bf16Path::kEmulated);
  EXPECT_TRUE(close(dgot, dwant, 1e-5, 1e-6,
                    product_scale(native::bf16_to_float(dy16), native::bf16_to_float(w16))));
}

// The second identical product finds its plan in the cache: no new miss
// (no descriptor build, no heuristic), one more hit.
TEST(CudaGemm, SecondIdenticalProductHitsThePlanCache) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random({41, 24}, 97).to(cuda0()), b = random({24, 40}, 98).to(cuda0());
  native::mm(a, b);
  const PlanCacheStats first = gemm_plan_cache_stats();
  Tensor again = native::mm(a, b);
  const PlanCacheStats second = gemm_plan_cache_stats();
  EXPECT_EQ(second.misses, first.misses);
  EXPECT_EQ(second.hits, first.hits + 1);
  EXPECT_TRUE(
      close(again, native::mm(a.cpu(), b.cpu()), 1e-5, 1e-6, product_scale(a.cpu(), b.cpu())));
  // Another shape is another plan.
  native::mm(a, random({24, 48}, 99).to(cuda0()));
  EXPECT_EQ(gemm_plan_cache_stats().misses, second.misses + 1);
}

TEST(CudaGelu, TanhFormForwardAndBackward) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({7, 300}, 60, -6, 6), g = random({7, 300}, 61);
  // tanh in libdevice and in cohort's vectorised CPU rows differ by a few ulp.
  EXPECT_TRUE(close(kernels::gelu_tanh(x.to(cuda0())), kernels::gelu_tanh(x), 1e-5, 1e-6));
  EXPECT_TRUE(close(kernels::gelu_tanh_backward(g.to(cuda0()), x.to(cuda0())),
                    kernels::gelu_tanh_backward(g, x), 1e-5, 1e-6));
}

TEST(CudaGelu, Bf16ActivationsComputeInFloat32) {
  COHORT_REQUIRE_CUDA();
  Tensor x16 = native::to_bf16(random({5, 128}, 62, -5, 5));
  Tensor g16 = native::to_bf16(random({5, 128}, 63));
  // The CPU computes on the widened values in float32; the device's result
  // is that value rounded to bf16: within one bf16 ulp (8 significant bits:
  // at most 2^-7 relative), allowing for the float32 results to differ in
  // their last bits and round the other way.
  Tensor want = kernels::gelu_tanh(native::bf16_to_float(x16));
  Tensor got = kernels::gelu_tanh(x16.to(cuda0()));
  EXPECT_EQ(got.dtype(), kBFloat16);
  EXPECT_TRUE(close(got, want, 1.0 / 128, 1e-6));
  Tensor dwant =
      kernels::gelu_tanh_backward(native::bf16_to_float(g16), native::bf16_to_float(x16));
  EXPECT_TRUE(
      close(kernels::gelu_tanh_backward(g16.to(cuda0()), x16.to(cuda0())), dwant, 1.0 / 128, 1e-6));
}

// The bound for linear + GELU's out: pre's (1.2e-5 of the products' scale,
// as gelu' is at most about 1.13), and where GELU runs in cuBLASLt's
// epilogue (fused), the epilogue's tanh, which may be the hardware's
// approximation (CUTLASS's fast_tanh: about 2^-11 absolute), so that out =
// 0.5 pre (1 + tanh) moves by up to 3e-4 |pre|.
Tensor gelu_out_bound(const Tensor& pre_scale, const Tensor& pre, bool fused) {
  Tensor bound = pre_scale.to(kFloat64).mul(1.2e-5);
  return fused ? bound.add(pre.to(kFloat64).abs().mul(3e-4)) : bound;
}

// linear + GELU: out_features a multiple of 8 takes the cuBLASLt epilogue,
// another the plain product and the GELU kernel; both match the CPU's, and so
// do the gradients through autograd (computed from pre, which the epilogue
// writes exactly).
TEST(CudaGelu, LinearGeluMatchesCpu) {
  COHORT_REQUIRE_CUDA();
  for (int64_t outf : {48, 13}) {
    const bool fused = outf % 8 == 0;
    Tensor x = random({3, 10, 32}, 70 + outf), w = random({outf, 32}, 71 + outf, -0.5, 0.5);
    Tensor b = random({outf}, 72 + outf), g = random({3, 10, outf}, 73 + outf);
    Tensor scale = product_scale(x, w.transpose(0, 1)).add(b.to(kFloat64).abs());
    kernels::LinearGeluResult want = kernels::linear_gelu(x, w, b);
    kernels::LinearGeluResult got =
        kernels::linear_gelu(x.to(cuda0()), w.to(cuda0()), b.to(cuda0()));
    Tensor out_bound = gelu_out_bound(scale, want.pre, fused);
    EXPECT_TRUE(close(got.pre, want.pre, 1e-5, 1e-6, scale)) << "pre, out_features " << outf;
    EXPECT_TRUE(close(got.out, want.out, 1.0, 1e-6, out_bound)) << "out, out_features " << outf;
    auto run = [&](Device d) {
      Tensor xd = x.to(d), wd = w.to(d), bd = b.to(d);
      xd.set_requires_grad(true);
      wd.set_requires_grad(true);
      bd.set_requires_grad(true);
      Tensor y = linear_gelu(xd, wd, bd);
      y.backward(g.to(d));
      return std::vector<Tensor>{y, xd.grad(), wd.grad(), bd.grad()};
    };
    std::vector<Tensor> cpu = run(kCPU), gpu = run(cuda0());
    EXPECT_TRUE(close(gpu[0], cpu[0], 1.0, 1e-6, out_bound)) << "y, out_features " << outf;
    const char* names[] = {"dx", "dw", "db"};
    for (int i = 1; i < 4; ++i)
      EXPECT_TRUE(close(gpu[i], cpu[i], 1e-5, 1e-4)) << names[i - 1] << ", out_features " << outf;
  }
}

// GPT-2's MLP up-projection (768 -> 3072, 128 rows): the shapes whose
// cuBLASLt kernels and GELU epilogue the model runs.
TEST(CudaGelu, LinearGeluAtGpt2Size) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({2, 64, 768}, 80), w = random({3072, 768}, 81, -0.05, 0.05);
  Tensor b = random({3072}, 82, -0.1, 0.1);
  kernels::LinearGeluResult want = kernels::linear_gelu(x, w, b);
  kernels::LinearGeluResult got = kernels::linear_gelu(x.to(cuda0()), w.to(cuda0()), b.to(cuda0()));
  Tensor scale = product_scale(x, w.transpose(0, 1)).add(b.to(kFloat64).abs());
  EXPECT_TRUE(close(got.pre, want.pre, 1e-5, 1e-6, scale));
  EXPECT_TRUE(close(got.out, want.out, 1.0, 1e-6, gelu_out_bound(scale, want.pre, true)));
}

// The bias gradients' column sums (gelu.cc, bf16_rows.cc) are reduce.cu's,
// split over the rows: at the GPT-2 benchmark's 16 x 1024 rows and widths 768
// and 3072, blocks of 32 columns times the splits give several blocks per SM
// of an H200's 132, where 32 columns a block alone gave 24 and 96.
TEST(GeluBiasGradient, ColumnSumSplitFillsTheDevice) {
  constexpr int64_t kSms = 132, kColumnsPerBlock = 32;
  for (int64_t cols : {768, 3072}) {
    const int64_t rows = 16 * 1024;
    const int64_t splits = column_sum_splits(rows, cols);
    EXPECT_GE((cols + kColumnsPerBlock - 1) / kColumnsPerBlock * splits, 4 * kSms) << cols;
    EXPECT_EQ(column_sum_scratch(rows, cols), cols * splits);
  }
  EXPECT_EQ(column_sum_splits(100, 768), 1);  // few rows: one split
}

// The bias gradients on the device against the CPU's (float64 sums of the
// same terms), over enough rows for many splits, and the same bits on a
// second run (a fixed order of the partials).
TEST(GeluBiasGradient, SplitSumsMatchCpuAndRepeat) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random({6, 700, 16}, 110), w = random({200, 16}, 111, -0.5, 0.5);
  Tensor g = random({6, 700, 200}, 112);
  kernels::LinearGeluResult fwd = kernels::linear_gelu(x, w, Tensor());
  kernels::LinearGeluGrads want =
      kernels::linear_gelu_backward(g, x, w, fwd.pre, false, false, true);
  auto device_db = [&] {
    return kernels::linear_gelu_backward(g.to(cuda0()), x.to(cuda0()), w.to(cuda0()),
                                         fwd.pre.to(cuda0()), false, false, true)
        .db;
  };
  Tensor db = device_db();
  // 4200 terms |.| < 1.2 each: float32 rounding of the CPU's sum and of the
  // device's (float64 partials) stays within 1e-5 relative + 1e-4.
  EXPECT_TRUE(close(db, want.db, 1e-5, 1e-4));
  EXPECT_TRUE(close(device_db(), db, 0, 0));

  // bf16 linear layers: the float32 incoming gradient's column sums.
  Tensor g32 = random({4200, 200}, 113);
  kernels::Bf16Rows r = kernels::to_bf16_with_column_sums(g32.to(cuda0()), true);
  EXPECT_TRUE(close(r.sums, native::sum(g32.to(kFloat64), {0}), 1e-6, 1e-5));
  EXPECT_TRUE(close(kernels::to_bf16_with_column_sums(g32.to(cuda0()), true).sums, r.sums, 0, 0));
}

}  // namespace
}  // namespace cohort::cuda
