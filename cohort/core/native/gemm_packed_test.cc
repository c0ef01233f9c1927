// cohort's packed GEMM (gemm_packed) on every kernel path against a plain
// double loop, on odd shapes, transposes, padded strides, alpha/beta; and the
// backend rule of native::gemm (gemm_backend) checked on the GPT's shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/linalg.h"

namespace cohort::native {
namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
};

std::vector<float> random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Operands of a case with row strides padded by 3 (so that ld != width is covered).
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Operands make(const Case& t, uint64_t seed) {
  Operands o;
  o.lda = (t.ta ? t.m : t.k) + 3;
  o.ldb = (t.tb ? t.k : t.n) + 3;
  o.ldc = t.n + 3;
  o.a = random_vec(static_cast<size_t>((t.ta ? t.k : t.m) * o.lda), seed);
  o.b = random_vec(static_cast<size_t>((t.tb ? t.n : t.k) * o.ldb), seed + 1);
  o.c = random_vec(static_cast<size_t>(t.m * o.ldc), seed + 2);
  return o;
}

// alpha op(A) op(B) + beta C in double.
std::vector<double> expected(const Case& t, const Operands& o, float alpha, float beta) {
  std::vector<double> r(o.c.begin(), o.c.end());
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = 0; j < t.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double av = t.ta ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
        const double bv = t.tb ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j];
        s += av * bv;
      }
      const double old = o.c[i * o.ldc + j];
      r[i * o.ldc + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * old);
    }
  return r;
}

// Largest |got - want| over the m x n part, scaled by sqrt(k) (fp32 sums of k
// products of values in [-1, 1]); the padding columns must be untouched.
void expect_matches(const Case& t, const std::vector<float>& before, const std::vector<float>& got,
                    const std::vector<double>& want, const char* what) {
  const double tol = 2e-6 * std::sqrt(static_cast<double>(t.k) + 1) * 4;
  const int64_t ldc = t.n + 3;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= t.n) {
        ASSERT_EQ(got[at], before[at]) << what << ": wrote padding at row " << i << " col " << j;
        continue;
      }
      ASSERT_NEAR(got[at], want[at], tol)
          << what << " " << (t.ta ? "T" : "N") << (t.tb ? "T" : "N") << " m " << t.m << " n " << t.n
          << " k " << t.k << " at (" << i << ", " << j << ")";
    }
  }
}

const std::vector<Case>& odd_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v;
    const int64_t shapes[][3] = {{1, 1, 1},     {7, 13, 5},     {37, 53, 29},  {6, 16, 256},
                                 {13, 70, 520}, {100, 33, 300}, {97, 131, 257}};
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto& s : shapes) v.push_back({ta, tb, s[0], s[1], s[2]});
    return v;
  }();
  return cases;
}

class GemmPacked : public testing::KernelPathTest {};

TEST_P(GemmPacked, MatchesReferenceOnOddShapesAndTransposes) {
  if (!gemm_packed_available()) {
    std::vector<float> a(1, 1.0f), b(1, 1.0f), c(1, 0.0f);
    EXPECT_THROW(
        gemm_packed(false, false, 1, 1, 1, 1.0f, a.data(), 1, b.data(), 1, 0.0f, c.data(), 1),
        InvalidArgument);
    return;
  }
  uint64_t seed = 1;
  for (const Case& t : odd_cases()) {
    for (float beta : {0.0f, 1.0f, 0.5f}) {
      for (int threads : {1, 2, 3}) {
        ThreadBudgetGuard g(threads);
        Operands o = make(t, seed += 3);
        const float alpha = beta == 0.5f ? -1.5f : 1.0f;
        const std::vector<double> want = expected(t, o, alpha, beta);
        std::vector<float> c = o.c;
        gemm_packed(t.ta, t.tb, t.m, t.n, t.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta,
                    c.data(), o.ldc);
        expect_matches(t, o.c, c, want, "gemm_packed");
      }
    }
  }
}

TEST_P(GemmPacked, BetaZeroNeverReadsC) {
  if (!gemm_packed_available()) GTEST_SKIP() << "no packed GEMM on this path";
  const Case t{false, true, 19, 40, 300};
  Operands o = make(t, 7);
  std::vector<float> c(o.c.size(), std::numeric_limits<float>::quiet_NaN());
  gemm_packed(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, c.data(),
              o.ldc);
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = 0; j < t.n; ++j) ASSERT_FALSE(std::isnan(c[i * o.ldc + j])) << i << " " << j;
}

TEST_P(GemmPacked, BitsDoNotDependOnTheThreadCount) {
  if (!gemm_packed_available()) GTEST_SKIP() << "no packed GEMM on this path";
  for (const Case& t : {Case{false, true, 301, 200, 600}, Case{true, false, 40, 700, 333}}) {
    Operands o = make(t, 11);
    std::vector<float> one = o.c;
    {
      ThreadBudgetGuard g(1);
      gemm_packed(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                  one.data(), o.ldc);
    }
    for (int threads : {2, 3}) {
      ThreadBudgetGuard g(threads);
      std::vector<float> many = o.c;
      gemm_packed(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                  many.data(), o.ldc);
      EXPECT_EQ(one, many) << threads << " threads, m " << t.m << " n " << t.n;
    }
  }
}

// native::gemm takes whichever backend gemm_backend names; every backend the
// rule can choose is checked on the odd shapes (float32, all transposes).
TEST_P(GemmPacked, EveryBackendOfNativeGemmMatchesReference) {
  uint64_t seed = 100;
  for (GemmBackend backend : {GemmBackend::kOpenBlas, GemmBackend::kPacked}) {
    if (backend == GemmBackend::kPacked && !gemm_packed_available()) continue;
    for (const Case& t : odd_cases()) {
      ThreadBudgetGuard g(2);
      Operands o = make(t, seed += 3);
      const std::vector<double> want = expected(t, o, 1.0f, 1.0f);
      std::vector<float> c = o.c;
      gemm_with(backend, t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                1.0f, c.data(), o.ldc);
      expect_matches(t, o.c, c, want, gemm_backend_name(backend));
    }
  }
}

// The GPT's hot products (docs/kernels.md's table): whatever the rule picks on
// 1 and 2 threads equals the other backend's result to fp32 tolerance, and the
// choice is the same on every call.
TEST_P(GemmPacked, RuleOnTheGptShapesAgreesWithTheOtherBackend) {
  // (M, K, N): the reference GPT's qkv and fc2 on 2048 rows, GPT-2's on 256.
  const int64_t linear[][3] = {
      {2048, 256, 768}, {2048, 1024, 256}, {256, 768, 2304}, {256, 3072, 768}};
  for (auto& s : linear) {
    const int64_t m = s[0], k = s[1], n = s[2];
    for (const Case& t :
         {Case{false, true, m, n, k}, Case{false, false, m, k, n}, Case{true, false, n, k, m}}) {
      for (int threads : {1, 2}) {
        const GemmBackend chosen = gemm_backend(t.ta, t.tb, t.m, t.n, t.k, threads);
        EXPECT_EQ(chosen, gemm_backend(t.ta, t.tb, t.m, t.n, t.k, threads));
        if (chosen == GemmBackend::kPacked) {
          EXPECT_TRUE(gemm_packed_available());
        }
        // docs/kernels.md's rule: packed exactly for A as stored on the
        // reference GPT's 2048 rows on the avx2 path, and for every product
        // of at least 2^21 multiply-adds on the avx512 path.
        const bool packed_expected =
            (kernel_path() == KernelPath::kAvx2 && !t.ta && t.m == 2048 && t.k <= 1024) ||
            (kernel_path() == KernelPath::kAvx512 && t.m * t.n * t.k >= (int64_t(1) << 21));
        EXPECT_EQ(chosen == GemmBackend::kPacked, packed_expected)
            << (t.ta ? "T" : "N") << (t.tb ? "T" : "N") << " m " << t.m << " n " << t.n << " k "
            << t.k;
        ThreadBudgetGuard g(threads);
        Operands o = make(t, 5);
        std::vector<float> got = o.c, other = o.c;
        gemm(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
             got.data(), o.ldc);
        const GemmBackend alt = gemm_packed_available() && chosen == GemmBackend::kOpenBlas
                                    ? GemmBackend::kPacked
                                    : GemmBackend::kOpenBlas;
        gemm_with(alt, t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                  other.data(), o.ldc);
        const double tol = 1e-5 * std::sqrt(static_cast<double>(t.k)) * 8;
        for (int64_t i = 0; i < t.m; ++i)
          for (int64_t j = 0; j < t.n; ++j)
            ASSERT_NEAR(got[i * o.ldc + j], other[i * o.ldc + j], tol)
                << gemm_backend_name(chosen) << " vs " << gemm_backend_name(alt) << " m " << t.m
                << " n " << t.n << " k " << t.k;
      }
    }
  }
}

COHORT_INSTANTIATE_KERNEL_PATHS(GemmPacked);

}  // namespace
}  // namespace cohort::native
