// MultiheadAttention: names and init, shapes in both layouts, the fused path
// against the composed one, masks, errors. Parity with
// torch.nn.MultiheadAttention is in tests/parity (gpt_parity_test.cc).
#include "cohort/nn/multihead_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cohort/nn/test_util.h"

namespace cohort::nn {
namespace {

using testing::expect_error;

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>(); }

TEST(MultiheadAttention, NamesInitAndShapes) {
  Generator gen(1);
  MultiheadAttention mha(8, 2, gen);
  std::vector<std::string> names;
  for (const auto& [n, t] : mha.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                             "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight().sizes(), (Shape{24, 8}));
  const double bound = std::sqrt(6.0 / (24 + 8));  // Xavier uniform
  EXPECT_LE(max(abs(mha.in_proj_weight())).item<double>(), bound);
  EXPECT_TRUE(equal(mha.in_proj_bias(), Tensor::zeros({24})));
  EXPECT_TRUE(equal(mha.out_proj().bias(), Tensor::zeros({8})));
  Tensor q = randn({5, 3, 8}, gen), kv = randn({7, 3, 8}, gen);  // [T, B, E]
  auto [out, w] = mha(q, kv, kv);
  EXPECT_EQ(out.sizes(), (Shape{5, 3, 8}));
  EXPECT_EQ(w.sizes(), (Shape{3, 5, 7}));
  // Averaged attention weights: each row sums to 1.
  EXPECT_LE(max_abs_diff(sum(w, {2}), Tensor::ones({3, 5})), 1e-5);
  auto [out2, w2] = mha(q, kv, kv, {.need_weights = true, .average_attn_weights = false});
  EXPECT_EQ(w2.sizes(), (Shape{3, 2, 5, 7}));
  EXPECT_LE(max_abs_diff(out2, out), 0);
  MultiheadAttention bf(8, 2, gen, {.batch_first = true});
  EXPECT_EQ(bf(randn({3, 5, 8}, gen)).sizes(), (Shape{3, 5, 8}));
  MultiheadAttention nob(8, 4, gen, {.bias = false});
  EXPECT_EQ(nob.named_parameters().size(), 2u);
  EXPECT_FALSE(nob.in_proj_bias().defined());
  EXPECT_EQ(nob(randn({4, 2, 8}, gen)).sizes(), (Shape{4, 2, 8}));
}

// Without masks and weights the module runs the fused attention op; with
// need_weights the composed ops: the same output and gradients.
TEST(MultiheadAttention, FusedPathMatchesComposed) {
  Generator gen(2);
  MultiheadAttention mha(16, 4, gen);
  Tensor x = randn({6, 2, 16}, gen).set_requires_grad(true);
  Tensor c = randn({6, 2, 16}, gen);
  for (bool causal : {false, true}) {
    Tensor fused = mha(x, x, x, {.need_weights = false, .is_causal = causal}).first;
    Tensor composed = mha(x, x, x, {.need_weights = true, .is_causal = causal}).first;
    EXPECT_LE(max_abs_diff(fused, composed), 1e-5) << "causal " << causal;
    sum(mul(fused, c)).backward();
    Tensor gf = x.grad().clone(), wf = mha.in_proj_weight().grad().clone();
    mha.zero_grad();
    x.mutable_grad().zero_();
    sum(mul(composed, c)).backward();
    EXPECT_LE(max_abs_diff(gf, x.grad()), 1e-5);
    EXPECT_LE(max_abs_diff(wf, mha.in_proj_weight().grad()), 1e-5);
    mha.zero_grad();
    x.mutable_grad().zero_();
  }
}

TEST(MultiheadAttention, MasksFollowPyTorchConventions) {
  Generator gen(3);
  MultiheadAttention mha(8, 2, gen, {.batch_first = true});
  Tensor x = randn({2, 5, 8}, gen);
  // is_causal equals a boolean upper-triangle mask (nonzero = blocked) and
  // the same mask as -inf floats.
  Tensor blocked = Tensor::zeros({5, 5}, kUInt8);
  Tensor minus_inf = Tensor::zeros({5, 5});
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = i + 1; j < 5; ++j) {
      blocked.data_ptr<uint8_t>()[i * 5 + j] = 1;
      minus_inf.data_ptr<float>()[i * 5 + j] = -INFINITY;
    }
  Tensor causal = mha(x, x, x, {.need_weights = false, .is_causal = true}).first;
  EXPECT_LE(max_abs_diff(mha(x, x, x, {.attn_mask = blocked}).first, causal), 1e-5);
  EXPECT_LE(max_abs_diff(mha(x, x, x, {.attn_mask = minus_inf}).first, causal), 1e-5);
  // Padding keys 3 and 4 of sequence 1 get zero weight.
  Tensor pad = Tensor::zeros({2, 5}, kInt64);
  pad.data_ptr<int64_t>()[5 + 3] = pad.data_ptr<int64_t>()[5 + 4] = 1;
  Tensor w = mha(x, x, x, {.key_padding_mask = pad}).second;  // [2, 5, 5]
  EXPECT_EQ(max(abs(slice(select(w, 0, 1), 1, 3, 5))).item<double>(), 0.0);
  EXPECT_GT(min(slice(select(w, 0, 0), 1, 3, 5)).item<double>(), 0.0);
}

TEST(MultiheadAttention, ErrorsNameTheShapes) {
  Generator gen(4);
  expect_error([&] { MultiheadAttention(10, 3, gen); },
               {"embed_dim (10) must be a positive multiple of num_heads (3)"});
  MultiheadAttention mha(8, 2, gen);
  expect_error([&] { mha(randn({5, 2, 6}, gen)); },
               {"MultiheadAttention(embed_dim=8", "[T, B, E] with E = 8", "[5, 2, 6]"});
  Tensor q = randn({5, 2, 8}, gen);
  expect_error([&] { mha(q, randn({7, 3, 8}, gen), randn({7, 3, 8}, gen)); },
               {"query's batch 2"});
  expect_error([&] { mha(q, q, q, {.attn_mask = Tensor::zeros({4, 5})}); },
               {"attn_mask must be [5, 5] or [4, 5, 5], got [4, 5]"});
  expect_error([&] { mha(q, q, q, {.key_padding_mask = Tensor::zeros({2, 4})}); },
               {"key_padding_mask must be [2, 5], got [2, 4]"});
}

}  // namespace
}  // namespace cohort::nn
