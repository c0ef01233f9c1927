// scaled_dot_product_attention: against the composed ops (matmul, softmax,
// an additive -inf mask), a finite-difference gradcheck, strided inputs and
// the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cohort/autograd/gradcheck.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/base/error.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/random.h"

namespace cohort {
namespace {

using autograd::gradcheck;
using autograd::GradcheckOptions;
using In = const std::vector<Tensor>&;

Tensor randn_grad(const Shape& s, uint64_t seed, double sd = 1.0) {
  Generator gen(seed);
  return (randn(s, gen) * sd).detach().set_requires_grad(true);
}

// softmax(q k^T * scale + mask) v with cohort's generic ops, as nanoGPT's
// attention without flash.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Tensor s = matmul(q, transpose(k, -2, -1)) * scale;
  if (causal) {
    const int64_t tq = q.size(-2), tk = k.size(-2);
    std::vector<float> m(static_cast<size_t>(tq * tk));
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j)
        m[static_cast<size_t>(i * tk + j)] =
            j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
    s = s + Tensor::from_vector(m, {tq, tk});
  }
  return matmul(softmax(s, -1), v);
}

struct Grads {
  Tensor y, gq, gk, gv;
};

template <class Fn>
Grads forward_backward(Fn fn, const Tensor& q, const Tensor& k, const Tensor& v, uint64_t seed) {
  for (const Tensor* t : {&q, &k, &v}) const_cast<Tensor&>(*t).set_grad(Tensor());
  Tensor y = fn(q, k, v);
  Generator gen(seed);
  Tensor r = randn(y.sizes(), gen);
  sum(y * r).backward();
  return {y.detach(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
}

TEST(ScaledDotProductAttention, MatchesComposedOps) {
  struct Case {
    Shape lead;
    int64_t tq, tk, d;
  };
  for (const Case& c : {Case{{2, 3}, 7, 7, 8}, Case{{1, 2}, 65, 65, 16}, Case{{3}, 33, 70, 32},
                        Case{{2, 1}, 70, 33, 7}, Case{{}, 130, 130, 64}})
    for (bool causal : {false, true}) {
      auto shape = [&](int64_t t) {
        Shape s = c.lead;
        s.push_back(t);
        s.push_back(c.d);
        return s;
      };
      Tensor q = randn_grad(shape(c.tq), 1), k = randn_grad(shape(c.tk), 2);
      Tensor v = randn_grad(shape(c.tk), 3);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      const Grads fused = forward_backward(
          [&](const Tensor& a, const Tensor& b, const Tensor& e) {
            return scaled_dot_product_attention(a, b, e, causal);
          },
          q, k, v, 4);
      const Grads ref =
          forward_backward([&](const Tensor& a, const Tensor& b,
                               const Tensor& e) { return composed(a, b, e, causal, scale); },
                           q, k, v, 4);
      const std::string what =
          shape_str(q.sizes()) + " x " + shape_str(k.sizes()) + (causal ? " causal" : "");
      EXPECT_EQ(fused.y.sizes(), q.sizes()) << what;
      EXPECT_TRUE(allclose(fused.y, ref.y, 1e-4, 1e-5)) << what;
      EXPECT_TRUE(allclose(fused.gq, ref.gq, 1e-4, 1e-4)) << what;
      EXPECT_TRUE(allclose(fused.gk, ref.gk, 1e-4, 1e-4)) << what;
      EXPECT_TRUE(allclose(fused.gv, ref.gv, 1e-4, 1e-4)) << what;
    }
}

TEST(ScaledDotProductAttention, Gradcheck) {
  // float32 kernel: coarse differences, loose tolerances (as conv2d's check).
  const GradcheckOptions opt{1e-2, 2e-3, 2e-2, 0};
  for (bool causal : {false, true}) {
    auto f = [causal](In x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); };
    auto g = [causal](In x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal, 0.7); };
    const std::vector<Tensor> same{randn_grad({2, 5, 4}, 1), randn_grad({2, 5, 4}, 2),
                                   randn_grad({2, 5, 4}, 3)};
    const std::vector<Tensor> longer_q{randn_grad({1, 2, 6, 3}, 4), randn_grad({1, 2, 4, 3}, 5),
                                       randn_grad({1, 2, 4, 3}, 6)};
    const std::vector<Tensor> longer_k{randn_grad({3, 3}, 7), randn_grad({5, 3}, 8),
                                       randn_grad({5, 3}, 9)};
    for (const auto& inputs : {same, longer_q, longer_k}) {
      auto r = gradcheck(f, inputs, opt);
      EXPECT_TRUE(r.ok) << (causal ? "causal: " : "") << r.message;
      auto r2 = gradcheck(g, inputs, opt);
      EXPECT_TRUE(r2.ok) << (causal ? "causal, scale 0.7: " : "scale 0.7: ") << r2.message;
    }
  }
}

TEST(ScaledDotProductAttention, DefaultScaleIsOneOverSqrtD) {
  Tensor q = randn_grad({2, 9, 16}, 1), k = randn_grad({2, 9, 16}, 2),
         v = randn_grad({2, 9, 16}, 3);
  EXPECT_TRUE(allclose(scaled_dot_product_attention(q, k, v, true),
                       scaled_dot_product_attention(q, k, v, true, 0.25), 0, 0));
  EXPECT_FALSE(allclose(scaled_dot_product_attention(q, k, v, true),
                        scaled_dot_product_attention(q, k, v, true, 0.5), 1e-3, 1e-3));
}

TEST(ScaledDotProductAttention, TransposedViewsOfOneProjectionGiveTheSameBits) {
  // GPT's layout: q, k, v are [B, H, T, D] views of one [B, T, 3C] tensor.
  const int64_t b = 2, t = 70, h = 4, d = 8, c = h * d;
  for (bool causal : {false, true}) {
    Tensor qkv = randn_grad({b, t, 3 * c}, 11);
    auto heads = [&](const Tensor& x, int64_t i) {
      return transpose(view(narrow(x, 2, i * c, c), {b, t, h, d}), 1, 2);
    };
    auto run = [&](bool copy) {
      qkv.set_grad(Tensor());
      Tensor q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
      if (copy) {
        q = contiguous(q);
        k = contiguous(k);
        v = contiguous(v);
      }
      Tensor y = scaled_dot_product_attention(q, k, v, causal);
      Generator gen(5);
      sum(y * randn(y.sizes(), gen)).backward();
      return std::pair<Tensor, Tensor>{y.detach(), qkv.grad().clone()};
    };
    const auto in_place = run(false), copied = run(true);
    EXPECT_FALSE(heads(qkv, 0).is_contiguous());
    EXPECT_EQ(in_place.first.to_vector<float>(), copied.first.to_vector<float>());
    EXPECT_EQ(in_place.second.to_vector<float>(), copied.second.to_vector<float>());
  }
}

// The packed form against the views it replaces, in float32 and under bf16
// (widened products, and bf16 products where the CPU has them: head_dim 32):
// the same output and qkv gradient bits; bad shapes are clear errors.
TEST(ScaledDotProductAttentionPacked, GivesTheBitsOfTheHeadViews) {
  const int64_t b = 2, t = 70, h = 4, d = 32, c = h * d;
  std::vector<std::optional<native::Bf16Path>> modes{std::nullopt, native::Bf16Path::kEmulated};
  if (native::bf16_path_supported(native::Bf16Path::kAvx512Bf16))
    modes.push_back(native::Bf16Path::kAvx512Bf16);
  for (const auto& mode : modes)
    for (bool causal : {false, true}) {
      std::optional<PrecisionScope> scope;
      if (mode) scope.emplace(PrecisionPolicy::bf16(*mode));
      Tensor qkv = randn_grad({b, t, 3 * c}, 11);
      auto heads = [&](const Tensor& x, int64_t i) {
        return transpose(view(narrow(x, 2, i * c, c), {b, t, h, d}), 1, 2);
      };
      auto run = [&](bool packed) {
        qkv.set_grad(Tensor());
        Tensor y =
            packed ? scaled_dot_product_attention_packed(qkv, h, causal, 0.3)
                   : reshape(transpose(scaled_dot_product_attention(heads(qkv, 0), heads(qkv, 1),
                                                                    heads(qkv, 2), causal, 0.3),
                                       1, 2),
                             {b, t, c});
        Generator gen(5);
        sum(y * randn(y.sizes(), gen)).backward();
        return std::pair<Tensor, Tensor>{y.detach(), qkv.grad().clone()};
      };
      const auto want = run(false), got = run(true);
      const std::string what =
          std::string(mode ? native::bf16_path_name(*mode) : "fp32") + (causal ? " causal" : "");
      EXPECT_EQ(got.first.sizes(), (Shape{b, t, c})) << what;
      EXPECT_EQ(got.first.to_vector<float>(), want.first.to_vector<float>()) << what;
      EXPECT_EQ(got.second.to_vector<float>(), want.second.to_vector<float>()) << what;
    }
  Tensor qkv = randn_grad({2, 5, 24}, 1);
  EXPECT_THROW(scaled_dot_product_attention_packed(qkv, 5), InvalidArgument);  // 24 != 3 x 5 x D
  EXPECT_THROW(scaled_dot_product_attention_packed(qkv, 0), InvalidArgument);
  EXPECT_THROW(scaled_dot_product_attention_packed(randn_grad({5, 24}, 2), 2), InvalidArgument);
  NoGradGuard no_grad;
  EXPECT_EQ(scaled_dot_product_attention_packed(qkv, 2).grad_fn(), nullptr);
}

TEST(ScaledDotProductAttention, LeadingDimsBeyondTwoAndNoGrad) {
  Tensor q = randn_grad({2, 2, 3, 5, 4}, 1), k = randn_grad({2, 2, 3, 6, 4}, 2);
  Tensor v = randn_grad({2, 2, 3, 6, 4}, 3);
  Tensor y = scaled_dot_product_attention(q, k, v);
  EXPECT_TRUE(allclose(y, composed(q, k, v, false, 0.5), 1e-4, 1e-5));
  NoGradGuard no_grad;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, true).grad_fn(), nullptr);
}

TEST(ScaledDotProductAttention, EmptyQueriesGiveZeroKeyGradients) {
  Tensor q = randn_grad({2, 0, 4}, 1), k = randn_grad({2, 3, 4}, 2), v = randn_grad({2, 3, 4}, 3);
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  EXPECT_EQ(y.sizes(), (Shape{2, 0, 4}));
  sum(y).backward();
  EXPECT_TRUE(allclose(k.grad(), Tensor::zeros({2, 3, 4}), 0, 0));
  EXPECT_TRUE(allclose(v.grad(), Tensor::zeros({2, 3, 4}), 0, 0));
  // No heads at all: still differentiable, with empty gradients.
  Tensor e = randn_grad({0, 3, 4}, 4);
  sum(scaled_dot_product_attention(e, e, e, true)).backward();
  EXPECT_EQ(e.grad().sizes(), (Shape{0, 3, 4}));
}

std::string error_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  try {
    scaled_dot_product_attention(q, k, v, true);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(ScaledDotProductAttention, BadInputsThrowNamingTheShapes) {
  const Tensor a = Tensor::zeros({2, 5, 4});
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(error_of(Tensor::zeros({4}), Tensor::zeros({4}), Tensor::zeros({4})),
                  "scaled_dot_product_attention: q, k and v must have the same rank >= 2"));
  EXPECT_TRUE(has(error_of(a, Tensor::zeros({2, 5, 3}), a),
                  "must have the same D, got q [2, 5, 4] and k [2, 5, 3]"));
  EXPECT_TRUE(has(error_of(a, Tensor::zeros({3, 5, 4}), a), "the same leading dims"));
  EXPECT_TRUE(has(error_of(a, a, Tensor::zeros({2, 6, 4})), "must have the same Tk"));
  EXPECT_TRUE(has(error_of(a, a, Tensor::zeros({2, 5, 6})), "Dv != D is not supported"));
  EXPECT_TRUE(has(error_of(a, a, Tensor::zeros({2, 5, 4}, DType::kFloat64)),
                  "only float32 is supported, got q float32, k float32, v float64"));
  EXPECT_TRUE(has(error_of(a, Tensor::zeros({2, 0, 4}), Tensor::zeros({2, 0, 4})),
                  "scaled_dot_product_attention: kv_len is 0 but q_len is 5"));
}

}  // namespace
}  // namespace cohort
