// The bf16 products (linalg_bf16.h): the conversions on every kernel path bit
// for bit against BFloat16's own; every bf16 path this CPU runs against a
// double loop over the same bf16 values (tight: products are exact, only the
// float32 accumulation rounds) and against the float32 product (bf16
// tolerance); a path the CPU lacks is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/test_util.h"

namespace cohort::native {
namespace {

using testing::random_tensor;

class Bf16Conversion : public cohort::testing::KernelPathTest {};

TEST_P(Bf16Conversion, MatchesBFloat16BitForBit) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          3.14159f,
                          1e-40f,
                          -1e-45f,
                          65504.0f,
                          3.4e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  // Ties: 1 + 2^-8 rounds down to 1 (even), 1 + 3 * 2^-8 up to 1 + 2^-6.
  v.push_back(1.0f + std::ldexp(1.0f, -8));
  v.push_back(1.0f + 3.0f * std::ldexp(1.0f, -8));
  std::vector<float> r = random_tensor({1000}, 7, kFloat32, -1e3, 1e3).to_vector<float>();
  v.insert(v.end(), r.begin(), r.end());
  Tensor x = Tensor::from_vector(v);
  Tensor y = to_bf16(x);
  ASSERT_EQ(y.dtype(), kBFloat16);
  const BFloat16* py = y.data_ptr<BFloat16>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(py[i].bits, BFloat16(v[i]).bits) << v[i];
  EXPECT_EQ(py[12].bits, BFloat16(1.0f).bits);
  Tensor back = bf16_to_float(y);
  std::vector<float> pb = back.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = static_cast<float>(py[i]);
    EXPECT_EQ(std::memcmp(&pb[i], &want, 4), 0) << i;
  }
}

// Subnormals and NaNs (which the vector conversion rounds differently) at
// every lane of a 64-float step and in the masked tail.
TEST_P(Bf16Conversion, SpecialValuesAnywhereInARowMatchBFloat16) {
  const float specials[] = {1e-40f, -1e-45f, std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::signaling_NaN()};
  for (int64_t at = 0; at < 150; ++at) {
    std::vector<float> v = random_tensor({150}, 11, kFloat32, -10, 10).to_vector<float>();
    v[static_cast<size_t>(at)] = specials[at % 4];
    const Tensor y = to_bf16(Tensor::from_vector(v));
    const BFloat16* py = y.data_ptr<BFloat16>();
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(py[i].bits, BFloat16(v[i]).bits) << "special at " << at << ", element " << i;
  }
}

TEST_P(Bf16Conversion, KeepsATransposedMatrixTransposed) {
  Tensor x = random_tensor({5, 7}, 3);
  Tensor y = to_bf16(x.transpose(0, 1));
  EXPECT_EQ(y.sizes(), (Shape{7, 5}));
  EXPECT_TRUE(allclose(bf16_to_float(y), x.transpose(0, 1).to(kBFloat16).to(kFloat32), 0, 0));
}

COHORT_INSTANTIATE_KERNEL_PATHS(Bf16Conversion);

TEST(Bf16Twin, ToBf16ReturnsTheTwinUntilTheValuesChange) {
  Tensor x = random_tensor({4, 6}, 5);
  // Zeros, not x's rounding: seeing them proves the twin was returned.
  Tensor twin = Tensor::zeros({4, 6}, kBFloat16);
  set_bf16_twin(x, twin);
  EXPECT_EQ(to_bf16(x).data_ptr<BFloat16>(), twin.data_ptr<BFloat16>());
  EXPECT_EQ(to_bf16(x.view({6, 4})).to_vector<float>(),
            x.view({6, 4}).to(kBFloat16).to_vector<float>());  // a view converts
  x.add_(Tensor::scalar(1.0));
  EXPECT_EQ(to_bf16(x).to_vector<float>(), x.to(kBFloat16).to_vector<float>());
  EXPECT_THROW(set_bf16_twin(x, Tensor::zeros({6, 4}, kBFloat16)), InvalidArgument);
  EXPECT_THROW(set_bf16_twin(x, Tensor::zeros({4, 6}, kFloat32)), InvalidArgument);
}

// The exact product of the bf16 values in double, as float32.
Tensor reference(const Tensor& a16, const Tensor& b16) {
  return mm_reference(a16.to(kFloat64), b16.to(kFloat64)).to(kFloat32);
}

TEST(MmBf16, EveryPathMatchesTheReferenceAndFloat32) {
  for (Bf16Path path : supported_bf16_paths()) {
    SCOPED_TRACE(bf16_path_name(path));
    for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 13, 5}, {64, 96, 33}, {130, 257, 70}}) {
      Tensor a = random_tensor({m, k}, 11), b = random_tensor({k, n}, 12);
      Tensor a16 = to_bf16(a), b16 = to_bf16(b);
      Tensor out = mm_bf16(a16, b16, path);
      ASSERT_EQ(out.dtype(), kFloat32);
      EXPECT_TRUE(allclose(out, reference(a16, b16), 1e-5, 1e-5 * k));
      // Against float32: inputs rounded to 8 bits of mantissa (2^-9 relative each).
      EXPECT_TRUE(allclose(out, mm(a, b), 1e-2, 2e-2 * std::sqrt(double(k))));
      // Transposed operands (views, no copy) give the same values.
      Tensor at = to_bf16(a.transpose(0, 1).contiguous()).transpose(0, 1);
      Tensor bt = to_bf16(b.transpose(0, 1).contiguous()).transpose(0, 1);
      EXPECT_TRUE(allclose(mm_bf16(at, bt, path), reference(a16, b16), 1e-5, 1e-5 * k));
    }
  }
}

TEST(MmBf16, LinearAndBatchedMatmulMatchTheReference) {
  for (Bf16Path path : supported_bf16_paths()) {
    SCOPED_TRACE(bf16_path_name(path));
    Tensor x = to_bf16(random_tensor({2, 3, 24}, 1)), w = to_bf16(random_tensor({10, 24}, 2));
    Tensor b = random_tensor({10}, 3);
    Tensor y = linear_bf16(x, w, b, path);
    EXPECT_EQ(y.sizes(), (Shape{2, 3, 10}));
    Tensor want = binary(BinaryOp::kAdd, reference(x.reshape({6, 24}), w.transpose(0, 1)), b);
    EXPECT_TRUE(allclose(y.reshape({6, 10}), want, 1e-5, 1e-4));
    // Batched with a broadcast batch dimension: [2,1,4,6] x [3,6,5] -> [2,3,4,5].
    Tensor p = to_bf16(random_tensor({2, 1, 4, 6}, 4)), q = to_bf16(random_tensor({3, 6, 5}, 5));
    Tensor r = matmul_bf16(p, q, path);
    ASSERT_EQ(r.sizes(), (Shape{2, 3, 4, 5}));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_TRUE(allclose(r.select(0, i).select(0, j),
                             reference(p.select(0, i).select(0, 0), q.select(0, j)), 1e-5, 1e-5));
  }
}

TEST(MmBf16, GemmHonoursAlphaBetaAndLeadingDimensions) {
  for (Bf16Path path : supported_bf16_paths()) {
    SCOPED_TRACE(bf16_path_name(path));
    const int64_t m = 5, n = 6, k = 7, lda = 9, ldb = 8, ldc = 10;  // A^T stored [k, lda]
    Tensor a = to_bf16(random_tensor({k, lda}, 1)), b = to_bf16(random_tensor({k, ldb}, 2));
    Tensor c = random_tensor({m, ldc}, 3);
    Tensor c0 = c.clone();
    gemm_bf16(path, true, false, m, n, k, 0.5f, a.data_ptr<BFloat16>(), lda, b.data_ptr<BFloat16>(),
              ldb, 2.0f, c.data_ptr<float>(), ldc);
    Tensor prod = reference(a.narrow(1, 0, m).transpose(0, 1), b.narrow(1, 0, n));
    Tensor want = axpby(prod, 0.5, c0.narrow(1, 0, n), 2.0);
    EXPECT_TRUE(allclose(c.narrow(1, 0, n), want, 1e-5, 1e-5));
    EXPECT_TRUE(allclose(c.narrow(1, n, ldc - n), c0.narrow(1, n, ldc - n), 0, 0));
  }
}

TEST(MmBf16, BlockedShapesAndThreadCountsGiveTheSameBits) {
  // Past one k block (256), one row block (16 tiles) and the column tile, with
  // an odd k and corner tiles: every path against the reference, and the
  // same bits on 1 and 2 threads.
  for (Bf16Path path : supported_bf16_paths()) {
    SCOPED_TRACE(bf16_path_name(path));
    for (auto [m, k, n] : {std::tuple{203, 517, 45}, {37, 300, 290}, {2, 3, 1}}) {
      Tensor a = to_bf16(random_tensor({m, k}, 21)), b = to_bf16(random_tensor({k, n}, 22));
      Tensor one, two;
      {
        ThreadBudgetGuard t(1);
        one = mm_bf16(a, b, path);
      }
      {
        ThreadBudgetGuard t(2);
        two = mm_bf16(a, b, path);
      }
      EXPECT_TRUE(allclose(one, reference(a, b), 1e-5, 1e-5 * k));
      if (path == Bf16Path::kAvx512Bf16) {
        EXPECT_TRUE(allclose(one, two, 0, 0));
      }
      Tensor bt = to_bf16(random_tensor({n, k}, 23));
      EXPECT_TRUE(allclose(mm_bf16(a, bt.transpose(0, 1), path), reference(a, bt.transpose(0, 1)),
                           1e-5, 1e-5 * k));
    }
  }
}

TEST(MmBf16, APathThisCpuLacksIsAClearError) {
  EXPECT_EQ(supported_bf16_paths().front(), Bf16Path::kEmulated);
  EXPECT_NO_THROW(check_bf16_path(Bf16Path::kEmulated, "test"));
  const bool onednn = bf16_path_supported(Bf16Path::kOnednn);
  const bool own = bf16_path_supported(Bf16Path::kAvx512Bf16);
  const Bf16Path best = onednn && cpu_features().amx_bf16 ? Bf16Path::kOnednn
                        : own                             ? Bf16Path::kAvx512Bf16
                        : onednn                          ? Bf16Path::kOnednn
                                                          : Bf16Path::kEmulated;
  EXPECT_EQ(best_bf16_path(), best);
  for (Bf16Path path : {Bf16Path::kOnednn, Bf16Path::kAvx512Bf16}) {
    const std::string why = bf16_path_unsupported_reason(path);
    if (why.empty()) continue;
    Tensor a = to_bf16(random_tensor({2, 2}, 1));
    try {
      mm_bf16(a, a, path);
      FAIL() << "mm_bf16 on " << bf16_path_name(path) << " ran on a CPU without it";
    } catch (const NotSupported& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("mm_bf16"), std::string::npos) << msg;
      EXPECT_NE(msg.find(bf16_path_name(path)), std::string::npos) << msg;
      EXPECT_NE(msg.find(why), std::string::npos) << msg;
      EXPECT_NE(msg.find("has:"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(parse_bf16_path("amx2"), InvalidArgument);
  EXPECT_EQ(parse_bf16_path("onednn"), Bf16Path::kOnednn);
  EXPECT_EQ(parse_bf16_path("avx512_bf16"), Bf16Path::kAvx512Bf16);
}

TEST(MmBf16, RejectsFloat32Operands) {
  Tensor a = random_tensor({2, 2}, 1);
  EXPECT_THROW(mm_bf16(a, to_bf16(a), Bf16Path::kEmulated), InvalidArgument);
  EXPECT_THROW(bf16_to_float(a), InvalidArgument);
}

}  // namespace
}  // namespace cohort::native
