// The row loops of every kernel path (transformer_rows.h) against the
// reference loops (double, PyTorch's formulas): lengths around the vector
// widths (8 and 16 floats) and the log-sum-exp chunk (2048), large and
// special values. Each test runs once per path (Paths/TransformerRows.*/
// baseline|avx2|avx512); paths this CPU cannot run are reported as skipped.
#include "cohort/core/kernels/transformer_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cohort/base/kernel_path_testing.h"

namespace cohort::kernels::detail {
namespace {

class TransformerRows : public cohort::testing::KernelPathTest {};

const int64_t kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 256, 768, 2047, 2049, 5000};
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> values(int64_t n, uint64_t seed, float lo = -4, float hi = 4) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

const detail::TransformerRows& ref() { return transformer_rows_reference(); }
const detail::TransformerRows& fast() { return transformer_rows(); }

// |got - want| <= atol + rtol |want|, NaN only where the reference has NaN.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " [" << i << "] = " << got[i] << ", want NaN";
      continue;
    }
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " [" << i << "]";
      continue;
    }
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i]))
        << what << " [" << i << "] of " << got.size();
  }
}

TEST_P(TransformerRows, GeluTanhMatchesReference) {
  for (int64_t n : kLengths) {
    std::vector<float> x = values(n, n, -12, 12), g = values(n, n + 1);
    if (n > 4) {
      x[0] = 0.0f;
      x[1] = -0.0f;
      x[2] = 80.0f;   // exp(-2u) underflows
      x[3] = -80.0f;  // exp(-2u) overflows: -0, as 0.5 x (1 + tanh) gives
    }
    const std::string at = " n=" + std::to_string(n);
    std::vector<float> y(n), y_ref(n), dx(n), dx_ref(n), db(n, 1.0f), db_ref(n, 1.0f);
    fast().gelu_tanh(x.data(), y.data(), n);
    ref().gelu_tanh(x.data(), y_ref.data(), n);
    expect_close(y, y_ref, 4e-6, 1e-12, "gelu_tanh" + at);
    fast().gelu_tanh_backward(g.data(), x.data(), dx.data(), db.data(), n);
    ref().gelu_tanh_backward(g.data(), x.data(), dx_ref.data(), db_ref.data(), n);
    expect_close(dx, dx_ref, 4e-6, 1e-6, "gelu_tanh_backward" + at);
    // db = 1 + dx cancels; its error is dx's (|dx| <= 4.5).
    expect_close(db, db_ref, 4e-6, 2e-5, "gelu_tanh_backward db" + at);
    // The linear epilogue: h + b kept, gelu of it.
    std::vector<float> h = x, h_ref = x, b = values(n, n + 2);
    fast().bias_gelu_tanh(h.data(), b.data(), y.data(), n);
    ref().bias_gelu_tanh(h_ref.data(), b.data(), y_ref.data(), n);
    expect_close(h, h_ref, 0, 0, "bias_gelu_tanh pre" + at);
    expect_close(y, y_ref, 4e-6, 1e-12, "bias_gelu_tanh" + at);
    fast().bias_gelu_tanh(h.data(), nullptr, y.data(), n);
    ref().bias_gelu_tanh(h_ref.data(), nullptr, y_ref.data(), n);
    expect_close(y, y_ref, 4e-6, 1e-12, "bias_gelu_tanh without bias" + at);
  }
  // Saturation and NaN, as the formula in double gives them.
  std::vector<float> x = {kNaN, 100.0f, -100.0f, kInf, 1e-30f, -1e-30f, 3.0f, -3.0f, 0.5f};
  std::vector<float> y(x.size()), y_ref(x.size());
  fast().gelu_tanh(x.data(), y.data(), x.size());
  ref().gelu_tanh(x.data(), y_ref.data(), x.size());
  expect_close(y, y_ref, 4e-6, 1e-12, "gelu_tanh special values");
  EXPECT_TRUE(std::signbit(y[2])) << "gelu(-100) is -0";
}

TEST_P(TransformerRows, LayerNormMatchesReference) {
  for (int64_t n : kLengths) {
    const std::string at = " n=" + std::to_string(n);
    // Long rows with an offset mean, so that a one-pass variance would lose
    // digits (short rows of such values would test float's s - mean only).
    const float lo = n >= 64 ? 96 : -4, hi = n >= 64 ? 104 : 4;
    std::vector<float> x = values(n, n, lo, hi), d = values(n, n + 1), w = values(n, n + 2),
                       b = values(n, n + 3);
    for (bool with_delta : {false, true})
      for (bool affine : {false, true}) {
        const std::string what = std::string(with_delta ? "add_" : "") + "layer_norm" +
                                 (affine ? "" : " (no affine)") + at;
        const float* pd = with_delta ? d.data() : nullptr;
        const float* pw = affine ? w.data() : nullptr;
        const float* pb = affine ? b.data() : nullptr;
        std::vector<float> s(n), s_ref(n), y(n), y_ref(n);
        double m, r, m_ref, r_ref;
        fast().layer_norm(x.data(), pd, s.data(), pw, pb, y.data(), n, 1e-5, &m, &r);
        ref().layer_norm(x.data(), pd, s_ref.data(), pw, pb, y_ref.data(), n, 1e-5, &m_ref, &r_ref);
        EXPECT_NEAR(m, m_ref, 1e-6 * std::abs(m_ref)) << what;
        EXPECT_NEAR(r, r_ref, 2e-5 * r_ref) << what;
        expect_close(y, y_ref, 5e-5, 5e-5, what);
        if (with_delta) expect_close(s, s_ref, 0, 0, what + " sum");
        // Without s_out the sum is recomputed; the same values.
        std::vector<float> y2(n);
        fast().layer_norm(x.data(), pd, nullptr, pw, pb, y2.data(), n, 1e-5, &m, &r);
        expect_close(y2, y, 0, 0, what + " without s_out");
        // Backward from the reference's statistics (what a caller saves).
        const std::vector<float>& xs = with_delta ? s_ref : x;
        std::vector<float> g = values(n, n + 4), dx(n), dx_ref(n), dw(n, 0.5f), dw_ref(n, 0.5f),
                           db(n, 0.25f), db_ref(n, 0.25f);
        fast().layer_norm_backward(g.data(), xs.data(), pw, m_ref, r_ref, dx.data(), dw.data(),
                                   db.data(), n);
        ref().layer_norm_backward(g.data(), xs.data(), pw, m_ref, r_ref, dx_ref.data(),
                                  dw_ref.data(), db_ref.data(), n);
        expect_close(dx, dx_ref, 1e-4, 1e-4, what + " dx");
        expect_close(dw, dw_ref, 1e-5, 1e-5, what + " dw");
        expect_close(db, db_ref, 0, 1e-6, what + " db");
        // Only the parameter gradients.
        std::vector<float> dw2(n, 0.5f);
        fast().layer_norm_backward(g.data(), xs.data(), pw, m_ref, r_ref, nullptr, dw2.data(),
                                   nullptr, n);
        expect_close(dw2, dw, 0, 0, what + " dw alone");
      }
  }
}

TEST_P(TransformerRows, AddToGivesTheReferenceBits) {
  for (int64_t n : kLengths) {
    std::vector<float> x = values(n, n), acc = values(n, n + 1, -1e3f, 1e3f);
    if (n > 2) x[1] = kNaN;
    std::vector<float> want = acc;
    ref().add_to(x.data(), want.data(), n);
    fast().add_to(x.data(), acc.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(want[i]))
        ASSERT_TRUE(std::isnan(acc[i])) << "n " << n << " [" << i << "]";
      else
        ASSERT_EQ(acc[i], want[i]) << "n " << n << " [" << i << "]";
  }
}

TEST_P(TransformerRows, LogSumExpMatchesReference) {
  for (int64_t n : kLengths) {
    const std::string at = " n=" + std::to_string(n);
    std::vector<float> x = values(n, n, -20, 20);
    // The maximum late in the row: the running sum is rescaled.
    if (n > 3000) x[n - 5] = 60.0f;
    const float lse = fast().log_sum_exp(x.data(), n), lse_ref = ref().log_sum_exp(x.data(), n);
    EXPECT_NEAR(lse, lse_ref, 2e-6 * std::abs(lse_ref) + 1e-6) << "log_sum_exp" << at;
    std::vector<float> p(n), p_ref(n);
    fast().softmax_scaled(x.data(), lse_ref, 0.75f, p.data(), n);
    ref().softmax_scaled(x.data(), lse_ref, 0.75f, p_ref.data(), n);
    expect_close(p, p_ref, 4e-6, 1e-37, "softmax_scaled" + at);
  }
  // Special rows: what log(sum(exp)) gives in double.
  const std::vector<std::vector<float>> rows = {{1, 2, kInf, 3}, {-kInf, -kInf, -kInf},
                                                {1, kNaN, 3},    {-kInf, 0, -kInf},
                                                {1e30f, -1e30f}, {-1e30f, -1e30f}};
  for (const auto& r : rows) {
    const int64_t n = static_cast<int64_t>(r.size());
    const float got = fast().log_sum_exp(r.data(), n), want = ref().log_sum_exp(r.data(), n);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << got;
    else if (std::isinf(want))
      EXPECT_EQ(got, want);
    else
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-6);
  }
}

COHORT_INSTANTIATE_KERNEL_PATHS(TransformerRows);

}  // namespace
}  // namespace cohort::kernels::detail
