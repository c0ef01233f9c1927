#include "cohort/core/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"

namespace cohort::kernels {
namespace {

struct Case {
  int64_t bh, tq, tk, d;
};

std::vector<Case> cases() {
  return {{2, 1, 1, 7},      {1, 7, 7, 7},      {2, 63, 63, 32},   {1, 64, 64, 64},
          {3, 65, 65, 48},   {1, 200, 200, 64}, {1, 200, 200, 80}, {2, 130, 65, 32},
          {1, 65, 130, 128}, {1, 7, 200, 64},   {1, 200, 7, 16},   {1, 1, 200, 64},
          {1, 200, 1, 64},   {2, 129, 128, 24}};
}

std::string name(const Case& c, bool causal) {
  return "bh " + std::to_string(c.bh) + " tq " + std::to_string(c.tq) + " tk " +
         std::to_string(c.tk) + " d " + std::to_string(c.d) + (causal ? " causal" : "");
}

std::vector<float> randn(int64_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// All outputs of one forward + backward run on contiguous buffers.
struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
};

struct Inputs {
  AttentionShape s;
  std::vector<float> q, k, v, dout;
};

Inputs make_inputs(const Case& c, bool causal, uint32_t seed, float q_sd = 1.0f) {
  Inputs in;
  in.s = AttentionShape{c.bh, c.tq, c.tk, c.d, causal, 1.0 / std::sqrt(static_cast<double>(c.d))};
  in.q = randn(c.bh * c.tq * c.d, seed, q_sd);
  in.k = randn(c.bh * c.tk * c.d, seed + 1);
  in.v = randn(c.bh * c.tk * c.d, seed + 2);
  in.dout = randn(c.bh * c.tq * c.d, seed + 3);
  return in;
}

Outputs run(const Inputs& in, bool reference) {
  const AttentionShape& s = in.s;
  Outputs r;
  r.out.assign(in.q.size(), 7.0f);
  r.lse.assign(static_cast<size_t>(s.batch_heads * s.q_len), 7.0f);
  r.dq.assign(in.q.size(), 7.0f);
  r.dk.assign(in.k.size(), 7.0f);
  r.dv.assign(in.v.size(), 7.0f);
  auto q = contiguous_heads(in.q.data(), s.q_len, s.head_dim);
  auto k = contiguous_heads(in.k.data(), s.kv_len, s.head_dim);
  auto v = contiguous_heads(in.v.data(), s.kv_len, s.head_dim);
  auto g = contiguous_heads(in.dout.data(), s.q_len, s.head_dim);
  auto o = contiguous_heads(r.out.data(), s.q_len, s.head_dim);
  auto dq = contiguous_heads(r.dq.data(), s.q_len, s.head_dim);
  auto dk = contiguous_heads(r.dk.data(), s.kv_len, s.head_dim);
  auto dv = contiguous_heads(r.dv.data(), s.kv_len, s.head_dim);
  if (reference) {
    attention_forward_reference(s, q, k, v, o, r.lse.data());
    attention_backward_reference(s, q, k, v, o, r.lse.data(), g, dq, dk, dv);
  } else {
    attention_forward(s, q, k, v, o, r.lse.data());
    attention_backward(s, q, k, v, o, r.lse.data(), g, dq, dk, dv);
  }
  return r;
}

// Largest |got - want| / (1 + |want|).
double max_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double e = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    e = std::max(e, std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  return std::isnan(e) ? 1e30 : e;
}

// tol: for the output and lse; gradients get 10x (float32 rounding of the
// scores is eps x |score|, so sharper softmaxes need more).
void expect_matches_reference(const Inputs& in, const std::string& what, double tol = 2e-6) {
  const Outputs ref = run(in, true), got = run(in, false);
  EXPECT_LT(max_err(got.out, ref.out), tol) << what << " out";
  EXPECT_LT(max_err(got.lse, ref.lse), tol) << what << " lse";
  EXPECT_LT(max_err(got.dq, ref.dq), 10 * tol) << what << " dq";
  EXPECT_LT(max_err(got.dk, ref.dk), 10 * tol) << what << " dk";
  EXPECT_LT(max_err(got.dv, ref.dv), 10 * tol) << what << " dv";
}

class AttentionPaths : public testing::KernelPathTest {};
COHORT_INSTANTIATE_KERNEL_PATHS(AttentionPaths);

TEST_P(AttentionPaths, ForwardAndBackwardMatchReference) {
  uint32_t seed = 1;
  for (const Case& c : cases())
    for (bool causal : {false, true})
      expect_matches_reference(make_inputs(c, causal, seed += 4), name(c, causal));
}

TEST_P(AttentionPaths, SharpSoftmaxMatchesReference) {
  // Scores of tens: each row's maximum moves block after block, so the
  // running rescaling is exercised, and most probabilities underflow.
  uint32_t seed = 100;
  for (const Case& c : {Case{1, 200, 200, 64}, Case{2, 65, 130, 7}})
    for (bool causal : {false, true})
      expect_matches_reference(make_inputs(c, causal, seed += 4, 8.0f), name(c, causal) + " sharp",
                               2e-5);
}

TEST_P(AttentionPaths, SameBitsForEveryThreadBudget) {
  // bh 1 with 2+ threads takes the two-pass backward, bh 3 with <= 3 threads
  // the one-pass one; dq must come out the same either way.
  for (const Case& c : {Case{1, 200, 200, 48}, Case{3, 130, 130, 64}})
    for (bool causal : {false, true}) {
      const Inputs in = make_inputs(c, causal, 9);
      Outputs first;
      {
        ThreadBudgetGuard guard(1);
        first = run(in, false);
      }
      for (int budget : {2, 3, 4, 2}) {
        ThreadBudgetGuard guard(budget);
        const Outputs r = run(in, false);
        const std::string what = name(c, causal) + " budget " + std::to_string(budget);
        EXPECT_EQ(r.out, first.out) << what;
        EXPECT_EQ(r.lse, first.lse) << what;
        EXPECT_EQ(r.dq, first.dq) << what;
        EXPECT_EQ(r.dk, first.dk) << what;
        EXPECT_EQ(r.dv, first.dv) << what;
      }
    }
}

TEST_P(AttentionPaths, StridedHeadsGiveTheSameBitsAsContiguous) {
  // q, k, v as the [B, H, T, D] views of one [B, T, 3, H, D] projection (GPT's
  // qkv); the outputs and gradients in a [B, T, H, D] layout.
  const int64_t b = 2, h = 3, t = 70, d = 16;
  for (bool causal : {false, true}) {
    const std::vector<float> qkv = randn(b * t * 3 * h * d, 21);
    const std::vector<float> gbuf = randn(b * t * h * d, 22);
    Inputs in;
    in.s = AttentionShape{b * h, t, t, d, causal, 0.3};
    for (auto* dst : {&in.q, &in.k, &in.v}) dst->resize(static_cast<size_t>(b * h * t * d));
    in.dout.resize(in.q.size());
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t di = 0; di < d; ++di) {
            const size_t dst = static_cast<size_t>(((bi * h + hi) * t + ti) * d + di);
            const int64_t src = ((bi * t + ti) * 3 * h + hi) * d + di;
            in.q[dst] = qkv[static_cast<size_t>(src)];
            in.k[dst] = qkv[static_cast<size_t>(src + h * d)];
            in.v[dst] = qkv[static_cast<size_t>(src + 2 * h * d)];
            in.dout[dst] = gbuf[static_cast<size_t>((bi * t + ti) * h * d + hi * d + di)];
          }
    const Outputs want = run(in, false);
    auto view = [&](const float* base) {
      return ConstHeadRows{base, h, t * 3 * h * d, d, 3 * h * d};
    };
    auto bthd = [&](float* base) { return HeadRows<float>{base, h, t * h * d, d, h * d}; };
    std::vector<float> out(gbuf.size()), lse(static_cast<size_t>(b * h * t)), dq(gbuf.size()),
        dk(gbuf.size()), dv(gbuf.size());
    attention_forward(in.s, view(qkv.data()), view(qkv.data() + h * d),
                      view(qkv.data() + 2 * h * d), bthd(out.data()), lse.data());
    attention_backward(in.s, view(qkv.data()), view(qkv.data() + h * d),
                       view(qkv.data() + 2 * h * d),
                       ConstHeadRows{out.data(), h, t * h * d, d, h * d}, lse.data(),
                       ConstHeadRows{gbuf.data(), h, t * h * d, d, h * d}, bthd(dq.data()),
                       bthd(dk.data()), bthd(dv.data()));
    EXPECT_EQ(lse, want.lse);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t di = 0; di < d; ++di) {
            const size_t c = static_cast<size_t>(((bi * h + hi) * t + ti) * d + di);
            const size_t s = static_cast<size_t>((bi * t + ti) * h * d + hi * d + di);
            ASSERT_EQ(out[s], want.out[c]);
            ASSERT_EQ(dq[s], want.dq[c]);
            ASSERT_EQ(dk[s], want.dk[c]);
            ASSERT_EQ(dv[s], want.dv[c]);
          }
  }
}

TEST_P(AttentionPaths, Bf16OperandsGiveTheBitsOfTheirWidenedValues) {
  // Rows of the bf16 operands padded to 2 d (strided heads); bh 1 with 2
  // threads takes the two-pass backward, bh 3 the one-pass one.
  for (const Case& c : {Case{1, 130, 130, 24}, Case{3, 70, 70, 16}, Case{2, 65, 130, 8}})
    for (bool causal : {false, true})
      for (int budget : {1, 2}) {
        ThreadBudgetGuard guard(budget);
        Inputs in = make_inputs(c, causal, 31);
        const int64_t d = c.d;
        auto narrow = [&](std::vector<float>& x) {  // x rounded to bf16; the padded bf16 copy
          std::vector<BFloat16> y(x.size() * 2);
          for (size_t i = 0; i < x.size(); ++i) {
            const size_t r = i / static_cast<size_t>(d), col = i % static_cast<size_t>(d);
            y[r * 2 * static_cast<size_t>(d) + col] = BFloat16(x[i]);
            x[i] = static_cast<float>(BFloat16(x[i]));
          }
          return y;
        };
        const auto q16 = narrow(in.q), k16 = narrow(in.k), v16 = narrow(in.v);
        const auto g16 = narrow(in.dout);
        const Outputs want = run(in, false);
        std::vector<float> out_r = want.out;
        const auto o16 = narrow(out_r);
        auto heads = [&](const std::vector<BFloat16>& x, int64_t rows) {
          return Bf16HeadRows{x.data(), 1, rows * 2 * d, 0, 2 * d};
        };
        Outputs got;
        got.out.assign(in.q.size(), 7.0f);
        got.lse.assign(want.lse.size(), 7.0f);
        got.dq.assign(in.q.size(), 7.0f);
        got.dk.assign(in.k.size(), 7.0f);
        got.dv.assign(in.v.size(), 7.0f);
        const AttentionShape& s = in.s;
        attention_forward(s, heads(q16, c.tq), heads(k16, c.tk), heads(v16, c.tk),
                          contiguous_heads(got.out.data(), c.tq, d), got.lse.data());
        EXPECT_EQ(got.out, want.out) << name(c, causal);
        EXPECT_EQ(got.lse, want.lse) << name(c, causal);
        // Backward against the float32 one on the same (rounded) output.
        Outputs want_b;
        want_b.dq.assign(in.q.size(), 7.0f);
        want_b.dk.assign(in.k.size(), 7.0f);
        want_b.dv.assign(in.v.size(), 7.0f);
        attention_backward(s, contiguous_heads<const float>(in.q.data(), c.tq, d),
                           contiguous_heads<const float>(in.k.data(), c.tk, d),
                           contiguous_heads<const float>(in.v.data(), c.tk, d),
                           contiguous_heads<const float>(out_r.data(), c.tq, d), want.lse.data(),
                           contiguous_heads<const float>(in.dout.data(), c.tq, d),
                           contiguous_heads(want_b.dq.data(), c.tq, d),
                           contiguous_heads(want_b.dk.data(), c.tk, d),
                           contiguous_heads(want_b.dv.data(), c.tk, d));
        attention_backward(
            s, heads(q16, c.tq), heads(k16, c.tk), heads(v16, c.tk), heads(o16, c.tq),
            want.lse.data(), heads(g16, c.tq), contiguous_heads(got.dq.data(), c.tq, d),
            contiguous_heads(got.dk.data(), c.tk, d), contiguous_heads(got.dv.data(), c.tk, d));
        const std::string what = name(c, causal) + " budget " + std::to_string(budget);
        EXPECT_EQ(got.dq, want_b.dq) << what;
        EXPECT_EQ(got.dk, want_b.dk) << what;
        EXPECT_EQ(got.dv, want_b.dv) << what;
        EXPECT_LT(max_err(got.dq, want.dq), 0.1) << what << ": dq far from float32's";
      }
}

TEST_P(AttentionPaths, NaNInputPropagates) {
  Inputs in = make_inputs({1, 70, 70, 8}, true, 3);
  in.k[static_cast<size_t>(66 * 8 + 2)] = std::nanf("");  // key 66: rows >= 66 see it
  const Outputs r = run(in, false);
  EXPECT_FALSE(std::isnan(r.out[65 * 8]));
  EXPECT_TRUE(std::isnan(r.out[66 * 8]));
  EXPECT_TRUE(std::isnan(r.lse[69]));
}

TEST(Attention, ScratchDoesNotGrowWithSequenceLength) {
  // Memory O(T): per task a fixed number of block x block and D x block tiles.
  for (int64_t d : {7, 64, 128}) {
    const int64_t small = attention_scratch_floats({8, 64, 64, d, true, 0.1});
    EXPECT_EQ(attention_scratch_floats({8, 8192, 8192, d, true, 0.1}), small);
    EXPECT_EQ(attention_scratch_floats({8, 1, 100000, d, false, 0.1}), small);
    EXPECT_LE(small, 2 * kAttentionBlock * (kAttentionBlock + 2 * d));
  }
}

TEST(Attention, InvalidShapesThrowNamingTheProblem) {
  auto message = [](const AttentionShape& s) {
    try {
      check_attention_shape(s, "attention_forward");
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({1, 4, 0, 8, false, 1.0}).find("attention_forward: kv_len is 0 but q_len is 4"),
            std::string::npos);
  EXPECT_NE(message({1, 4, 4, 0, false, 1.0}).find("head_dim must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(message({1, 4, 4, 8, false, NAN}).find("scale must be finite"), std::string::npos);
  EXPECT_NE(message({-1, 4, 4, 8, false, 1.0}).find("sizes must be >= 0"), std::string::npos);
  EXPECT_EQ(message({1, 0, 0, 8, true, 1.0}), "no error");
}

}  // namespace
}  // namespace cohort::kernels
