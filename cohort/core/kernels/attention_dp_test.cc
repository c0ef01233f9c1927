// attention.h's bf16 overloads with bf16_products (the vdpbf16ps tasks of
// attention_dp.h) against the double reference on the same rounded operands:
// within bf16 rounding (P and dS are rounded before they are multiplied),
// the same bits for every thread budget and both backward schedules, and the
// widened float32 tasks wherever the products are not supported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/kernels/attention.h"
#include "cohort/core/kernels/attention_dp.h"

namespace cohort::kernels {
namespace {

struct Case {
  int64_t bh, tq, tk, d;
};

std::string name(const Case& c, bool causal, int budget) {
  return "bh " + std::to_string(c.bh) + " tq " + std::to_string(c.tq) + " tk " +
         std::to_string(c.tk) + " d " + std::to_string(c.d) + (causal ? " causal" : "") +
         " budget " + std::to_string(budget);
}

// A [bh, rows, d] operand as bf16 rows padded to 2 d (strided heads), and its
// values (the rounded floats, contiguous).
struct Operand {
  std::vector<BFloat16> bf16;
  std::vector<float> value;
  int64_t rows, d;
  Bf16HeadRows heads() const { return Bf16HeadRows{bf16.data(), 1, rows * 2 * d, 0, 2 * d}; }
  ConstHeadRows float_heads() const { return contiguous_heads(value.data(), rows, d); }
};

Operand operand(const std::vector<float>& x, int64_t rows, int64_t d) {
  Operand o{std::vector<BFloat16>(x.size() * 2), std::vector<float>(x.size()), rows, d};
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t r = i / static_cast<size_t>(d), col = i % static_cast<size_t>(d);
    o.bf16[r * 2 * static_cast<size_t>(d) + col] = BFloat16(x[i]);
    o.value[i] = static_cast<float>(BFloat16(x[i]));
  }
  return o;
}

Operand random_operand(int64_t bh, int64_t rows, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(bh * rows * d));
  for (auto& v : x) v = dist(rng);
  return operand(x, rows, d);
}

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

// Outputs of the shapes of q and k, filled with 7 (what nothing wrote).
Outputs unwritten(const AttentionShape& s, const Operand& q, const Operand& k) {
  Outputs r;
  r.out.assign(q.value.size(), 7.0f);
  r.lse.assign(static_cast<size_t>(s.batch_heads * s.q_len), 7.0f);
  r.dq.assign(q.value.size(), 7.0f);
  r.dk.assign(k.value.size(), 7.0f);
  r.dv.assign(k.value.size(), 7.0f);
  return r;
}

// Forward, then backward on the forward's output rounded to bf16 (what the
// autograd op keeps).
Outputs run(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v,
            const Operand& g, bool products) {
  const int64_t d = s.head_dim;
  Outputs r = unwritten(s, q, k);
  attention_forward(s, q.heads(), k.heads(), v.heads(), contiguous_heads(r.out.data(), s.q_len, d),
                    r.lse.data(), products);
  const Operand o = operand(r.out, s.q_len, d);
  attention_backward(s, q.heads(), k.heads(), v.heads(), o.heads(), r.lse.data(), g.heads(),
                     contiguous_heads(r.dq.data(), s.q_len, d),
                     contiguous_heads(r.dk.data(), s.kv_len, d),
                     contiguous_heads(r.dv.data(), s.kv_len, d), products);
  return r;
}

Outputs reference(const AttentionShape& s, const Operand& q, const Operand& k, const Operand& v,
                  const Operand& g) {
  const int64_t d = s.head_dim;
  Outputs r = unwritten(s, q, k);
  auto o = contiguous_heads(r.out.data(), s.q_len, d);
  attention_forward_reference(s, q.float_heads(), k.float_heads(), v.float_heads(), o,
                              r.lse.data());
  attention_backward_reference(
      s, q.float_heads(), k.float_heads(), v.float_heads(), o, r.lse.data(), g.float_heads(),
      contiguous_heads(r.dq.data(), s.q_len, d), contiguous_heads(r.dk.data(), s.kv_len, d),
      contiguous_heads(r.dv.data(), s.kv_len, d));
  return r;
}

// Largest |got - want| / (1 + |want|).
double max_err(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  return std::isnan(e) ? 1e30 : e;
}

void expect_same_bits(const Outputs& a, const Outputs& b, const std::string& what) {
  EXPECT_EQ(a.out, b.out) << what;
  EXPECT_EQ(a.lse, b.lse) << what;
  EXPECT_EQ(a.dq, b.dq) << what;
  EXPECT_EQ(a.dk, b.dk) << what;
  EXPECT_EQ(a.dv, b.dv) << what;
}

AttentionShape shape(const Case& c, bool causal) {
  return AttentionShape{c.bh, c.tq, c.tk, c.d, causal, 1.0 / std::sqrt(static_cast<double>(c.d))};
}

TEST(AttentionBf16Products, MatchTheReferenceWithinBf16RoundingOnAnyBudget) {
  if (!attention_bf16_products_supported(shape({1, 1, 1, 32}, false)))
    GTEST_SKIP() << "no avx512_bf16 here: the bf16 products never run";
  // Odd block tails on both sides, q_len != kv_len, one row; bh 1 with 2
  // threads takes the two-pass backward, bh 3 the one-pass one.
  const Case cases[] = {{1, 130, 130, 64}, {3, 70, 70, 32}, {2, 65, 131, 64},
                        {1, 7, 200, 32},   {1, 200, 7, 96}, {1, 1, 1, 32}};
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (bool causal : {false, true}) {
      const AttentionShape s = shape(c, causal);
      const Operand q = random_operand(c.bh, c.tq, c.d, seed += 4);
      const Operand k = random_operand(c.bh, c.tk, c.d, seed + 1);
      const Operand v = random_operand(c.bh, c.tk, c.d, seed + 2);
      const Operand g = random_operand(c.bh, c.tq, c.d, seed + 3);
      const Outputs want = reference(s, q, k, v, g);
      Outputs first;
      for (int budget : {1, 2}) {
        ThreadBudgetGuard guard(budget);
        const std::string what = name(c, causal, budget);
        const Outputs got = run(s, q, k, v, g, true);
        EXPECT_LT(max_err(got.lse, want.lse), 1e-5) << what;
        EXPECT_LT(max_err(got.out, want.out), 1e-2) << what;
        EXPECT_LT(max_err(got.dq, want.dq), 3e-2) << what;
        EXPECT_LT(max_err(got.dk, want.dk), 3e-2) << what;
        EXPECT_LT(max_err(got.dv, want.dv), 3e-2) << what;
        if (budget == 1) {
          first = got;
          // Not the widened tasks under another name: P is rounded here
          // (with one key P is 1, exact in bf16).
          if (c.tk > 1) {
            EXPECT_NE(got.out, run(s, q, k, v, g, false).out) << what;
          }
          continue;
        }
        expect_same_bits(got, first, what);
      }
    }
}

TEST(AttentionBf16Products, OtherHeadDimsTakeTheWidenedTasks) {
  // head_dim 24 is no whole number of 32-column panels: asking for bf16
  // products gives the widened tasks' bits, on any CPU.
  const AttentionShape s = shape({2, 70, 70, 24}, true);
  EXPECT_FALSE(attention_bf16_products_supported(s));
  const Operand q = random_operand(2, 70, 24, 5), k = random_operand(2, 70, 24, 6);
  const Operand v = random_operand(2, 70, 24, 7), g = random_operand(2, 70, 24, 8);
  expect_same_bits(run(s, q, k, v, g, true), run(s, q, k, v, g, false), "head_dim 24");
}

// The products' register tiles (6 x 64 and 8 x 32, and every shorter last
// tile) against the sum of pair products in double, for both A layouts,
// with and without a causal band; nothing written past m rows or n columns.
// dp_scores: the columns the band needs hold the sums, the others their
// sums or 0; dp_acc: a is zero outside the band, the sums are added to c.
TEST(AttentionDpProducts, EveryRowCountPanelCountAndBandGivesTheSumOfPairProducts) {
  const detail::AttentionDpOps* dp = detail::attention_dp_ops();
  if (dp == nullptr) GTEST_SKIP() << "no avx512_bf16 here: the products are not handed out";
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto bf16_bits = [&] { return BFloat16(dist(rng)).bits; };
  const auto value = [](uint16_t bits) {
    BFloat16 x;
    x.bits = bits;
    return static_cast<double>(static_cast<float>(x));
  };
  const int64_t ldc = 128;
  const detail::Band bands[] = {{},
                                {-detail::kUnbounded, 0},
                                {-detail::kUnbounded, 37},
                                {-detail::kUnbounded, -3},
                                {5, detail::kUnbounded},
                                {-20, 9}};
  for (int64_t pairs : {1, 5, 32})
    for (int64_t n : {32, 64, 96})
      for (int64_t m = 1; m <= 14; ++m)
        for (const detail::Band& band : bands)
          for (bool accumulate : {false, true})
            for (bool transposed : {false, true}) {
              // Rows of words (a_qs 2) or panel words read as rows (a_rs 2).
              const int64_t a_rs = transposed ? 2 : 2 * pairs, a_qs = transposed ? 2 * m : 2;
              std::vector<uint16_t> a(static_cast<size_t>(2 * m * pairs));
              for (int64_t r = 0; r < m; ++r)
                for (int64_t e = 0; e < 2 * pairs; ++e) {
                  const bool in_band = e >= r + band.lo && e < r + 1 + band.hi;
                  a[static_cast<size_t>(r * a_rs + e / 2 * a_qs + e % 2)] =
                      accumulate && !in_band ? 0 : bf16_bits();
                }
              std::vector<uint32_t> b(static_cast<size_t>(n * pairs));
              for (auto& w : b) w = bf16_bits() | (uint32_t{bf16_bits()} << 16);
              std::vector<float> c(static_cast<size_t>((m + 2) * ldc));
              for (auto& x : c) x = dist(rng);
              const std::vector<float> before = c;
              (accumulate ? dp->dp_acc : dp->dp_scores)(m, n, pairs, a.data(), a_rs, a_qs, b.data(),
                                                        c.data(), ldc, band);
              const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) +
                                       " pairs " + std::to_string(pairs) + " band " +
                                       std::to_string(band.lo) + " " + std::to_string(band.hi) +
                                       (accumulate ? " dp_acc" : " dp_scores") +
                                       (transposed ? " transposed" : "");
              for (int64_t r = 0; r < m + 2; ++r)
                for (int64_t x = 0; x < ldc; ++x) {
                  const size_t at = static_cast<size_t>(r * ldc + x);
                  if (r >= m || x >= n) {
                    ASSERT_EQ(c[at], before[at]) << what << " wrote (" << r << ", " << x << ")";
                    continue;
                  }
                  double want = accumulate ? before[at] : 0.0;
                  for (int64_t q = 0; q < pairs; ++q) {
                    const uint32_t w =
                        b[static_cast<size_t>((x / 32) * pairs * 32 + q * 32 + x % 32)];
                    for (int e = 0; e < 2; ++e)
                      want += value(a[static_cast<size_t>(r * a_rs + q * a_qs + e)]) *
                              value(static_cast<uint16_t>(w >> (16 * e)));
                  }
                  if (!accumulate && x >= r + 1 + band.hi && c[at] == 0.0f) continue;
                  ASSERT_NEAR(c[at], want, 1e-5 * (1 + static_cast<double>(pairs)))
                      << what << " at (" << r << ", " << x << ")";
                }
            }
}

}  // namespace
}  // namespace cohort::kernels
