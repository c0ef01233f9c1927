// The transformer ops (gelu "tanh", linear_gelu, add_layer_norm, the chunked
// cross_entropy) and the PyTorch conveniences (tril, triu, masked_fill,
// where with a number, split, chunk): finite-difference gradchecks in
// float64, and in float32 on every kernel path the fused ops against the same
// model composed from unfused ops (values and every gradient).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cohort/autograd/gradcheck.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/kernel_path_testing.h"

namespace cohort {
namespace {

using autograd::gradcheck;
using In = const std::vector<Tensor>&;

Tensor randn(const Shape& s, uint64_t seed, DType dt = kFloat64, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, scale);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = n(g);
  return Tensor::from_vector(v, s).to(dt).set_requires_grad(true);
}

#define EXPECT_GRADCHECK(...)         \
  do {                                \
    auto r_ = gradcheck(__VA_ARGS__); \
    EXPECT_TRUE(r_.ok) << r_.message; \
  } while (0)

TEST(FusedOps, GradcheckGeluTanhAndLinearGelu) {
  Tensor x = randn({3, 7}, 1, kFloat64, 2.0);
  EXPECT_GRADCHECK([](In v) { return gelu(v[0], "tanh"); }, {x});
  Tensor x3 = randn({2, 3, 5}, 2), w = randn({4, 5}, 3), b = randn({4}, 4);
  EXPECT_GRADCHECK([](In v) { return linear_gelu(v[0], v[1], v[2]); }, {x3, w, b});
  EXPECT_GRADCHECK([](In v) { return linear_gelu(v[0], v[1]); }, {x3, w});
}

TEST(FusedOps, GradcheckAddLayerNorm) {
  Tensor x = randn({2, 3, 6}, 1), d = randn({2, 3, 6}, 2), w = randn({6}, 3), b = randn({6}, 4);
  // Both outputs used, each alone, and without the affine parameters.
  EXPECT_GRADCHECK(
      [](In v) {
        auto [s, y] = add_layer_norm(v[0], v[1], v[2], v[3]);
        return s * 0.5 + y;
      },
      {x, d, w, b});
  EXPECT_GRADCHECK([](In v) { return add_layer_norm(v[0], v[1], v[2], v[3]).second; },
                   {x, d, w, b});
  EXPECT_GRADCHECK([](In v) { return add_layer_norm(v[0], v[1], v[2], v[3]).first; }, {x, d, w, b});
  EXPECT_GRADCHECK([](In v) { return add_layer_norm(v[0], v[1], Tensor(), Tensor()).second; },
                   {x, d});
}

TEST(FusedOps, GradcheckCrossEntropy) {
  Tensor logits = randn({5, 7}, 1, kFloat64, 3.0);
  Tensor t = Tensor::from_vector<int64_t>({3, -100, 0, 6, 3}, {5});
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum})
    EXPECT_GRADCHECK([&](In v) { return cross_entropy(v[0], t, red); }, {logits});
  Tensor one = randn({4}, 2);
  EXPECT_GRADCHECK([](In v) { return cross_entropy(v[0], Tensor::scalar(1.0, kInt64)); }, {one});
}

TEST(FusedOps, GradcheckMaskingAndSplitting) {
  Tensor x = randn({2, 4, 5}, 1);
  for (int64_t d : {-2, 0, 1, 3}) {
    EXPECT_GRADCHECK([d](In v) { return tril(v[0], d); }, {x});
    EXPECT_GRADCHECK([d](In v) { return triu(v[0], d); }, {x});
  }
  // The mask broadcasts against x (and may broadcast x: out is [2, 4, 5]).
  Tensor mask = gt(randn({4, 1}, 2).detach(), 0.0);
  Tensor row = randn({5}, 3);
  EXPECT_GRADCHECK([&](In v) { return masked_fill(v[0], mask, -3.0); }, {x});
  EXPECT_GRADCHECK([&](In v) { return masked_fill(v[0], mask, -3.0); }, {row});
  Tensor m3 = gt(randn({2, 4, 5}, 4).detach(), 0.0);
  EXPECT_GRADCHECK([&](In v) { return where(m3, v[0], 2.5); }, {row});
  EXPECT_GRADCHECK([&](In v) { return where(m3, -1.0, v[0]); }, {x});
  // Pieces weighted differently and joined again.
  EXPECT_GRADCHECK(
      [](In v) {
        std::vector<Tensor> p = split(v[0], 2, 1);
        return cat({p[0] * 2.0, p[1], p[0] * p[1]}, 1);
      },
      {x});
  EXPECT_GRADCHECK(
      [](In v) {
        std::vector<Tensor> p = split(v[0], std::vector<int64_t>{1, 0, 4}, -1);
        return cat({p[2] * 3.0, p[0]}, -1);
      },
      {x});
  EXPECT_GRADCHECK(
      [](In v) {
        std::vector<Tensor> p = chunk(v[0], 3, 2);
        return p[0] * p[1] + sum(p[2]);
      },
      {x});
}

TEST(FusedOps, GeluRejectsUnknownApproximation) {
  try {
    gelu(Tensor::ones({2}), "fast");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("\"none\" or \"tanh\""), std::string::npos) << e.what();
  }
  EXPECT_TRUE(equal(gelu(Tensor::ones({2}), "none"), gelu(Tensor::ones({2}))));
}

TEST(FusedOps, SplitAndChunkAreViewsWithPyTorchSizes) {
  Tensor x = Tensor::arange(0.0, 10.0).reshape({5, 2});
  auto sizes = [](const std::vector<Tensor>& p) {
    std::vector<int64_t> s;
    for (const Tensor& t : p) s.push_back(t.size(0));
    return s;
  };
  EXPECT_EQ(sizes(chunk(x, 4)), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes(chunk(x, 5)), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(sizes(chunk(x, 7)), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(sizes(split(x, 2)), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes(split(x, 7)), (std::vector<int64_t>{5}));
  EXPECT_EQ(sizes(split(x, std::vector<int64_t>{3, 0, 2})), (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(chunk(Tensor::zeros({0, 3}), 3).size(), 3u);  // PyTorch: chunks empty pieces
  EXPECT_EQ(split(Tensor::zeros({0, 3}), 2).size(), 1u);
  std::vector<Tensor> cols = chunk(x, 2, -1);
  EXPECT_EQ(cols[1].sizes(), (Shape{5, 1}));
  cols[1].fill_(-1.0);  // a view: writes through to x
  EXPECT_EQ(x.to_vector<float>()[1], -1.0f);
  EXPECT_THROW(split(x, 0), InvalidArgument);
  EXPECT_THROW(split(x, std::vector<int64_t>{2, 2}), InvalidArgument);
  EXPECT_THROW(chunk(x, 0), InvalidArgument);
  EXPECT_THROW(chunk(x, 2, 2), InvalidArgument);
}

TEST(FusedOps, MaskingValues) {
  Tensor x = Tensor::arange(1.0, 7.0).reshape({2, 3});
  EXPECT_EQ(tril(x).to_vector<float>(), (std::vector<float>{1, 0, 0, 4, 5, 0}));
  EXPECT_EQ(triu(x, 1).to_vector<float>(), (std::vector<float>{0, 2, 3, 0, 0, 6}));
  EXPECT_EQ(tril(x, -5).to_vector<float>(), (std::vector<float>(6, 0.0f)));
  EXPECT_EQ(triu(Tensor::ones({2, 2}, kInt64), 0).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_THROW(tril(Tensor::ones({3})), InvalidArgument);
  // The causal mask of attention, spelled as PyTorch users spell it.
  Tensor causal = eq(tril(Tensor::ones({3, 3})), Tensor::zeros({3, 3}));
  Tensor att = masked_fill(Tensor::zeros({2, 3, 3}), causal, -INFINITY);
  EXPECT_EQ(att.sizes(), (Shape{2, 3, 3}));
  EXPECT_EQ(att.to_vector<float>()[1], -INFINITY);
  EXPECT_EQ(att.to_vector<float>()[3], 0.0f);
  EXPECT_EQ(masked_fill(Tensor::zeros({3}), Tensor::ones({2, 3}, kUInt8), 1.0).sizes(),
            (Shape{2, 3}));
  EXPECT_THROW(masked_fill(x, Tensor::ones({2, 3}), 1.0), InvalidArgument);  // float mask
  Tensor m = Tensor::from_vector<uint8_t>({1, 0, 1}, {3});
  EXPECT_EQ(where(m, Tensor::ones({3}, kFloat64), 5.0).dtype(), kFloat64);
  EXPECT_EQ(where(m, 5.0, Tensor::ones({3})).to_vector<float>(), (std::vector<float>{5, 1, 5}));
  EXPECT_EQ(where(m, Tensor::ones({3}, kInt64), 0.5).to_vector<float>(),
            (std::vector<float>{1, 0.5f, 1}));
}

class FusedOpsPaths : public cohort::testing::KernelPathTest {};

// max |a - b| <= atol + rtol max |b|.
void expect_close(const Tensor& a, const Tensor& b, double rtol, double atol, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  EXPECT_LE(worst, atol + rtol * scale) << what << " (scale " << scale << ")";
}

// One transformer MLP block and the loss, fused and composed, in float32: the
// same values and gradients (x, delta, LayerNorm and linear parameters).
TEST_P(FusedOpsPaths, FusedBlockMatchesComposedOps) {
  const int64_t rows = 45, c = 20, v = 37;
  Tensor x = randn({rows, c}, 1, kFloat32), d = randn({rows, c}, 2, kFloat32);
  Tensor lw = randn({c}, 3, kFloat32), lb = randn({c}, 4, kFloat32);
  Tensor w1 = randn({4 * c, c}, 5, kFloat32, 0.2), b1 = randn({4 * c}, 6, kFloat32);
  Tensor w2 = randn({v, 4 * c}, 7, kFloat32, 0.2);
  std::vector<int64_t> tv(rows);
  for (int64_t i = 0; i < rows; ++i) tv[i] = i % 9 == 4 ? -100 : (i * 31) % v;
  Tensor target = Tensor::from_vector(tv, {rows});
  const std::vector<Tensor> params = {x, d, lw, lb, w1, b1, w2};
  auto run = [&](bool fused) {
    for (const Tensor& p : params) p.set_grad(Tensor());
    Tensor s, y, h;
    if (fused) {
      std::tie(s, y) = add_layer_norm(x, d, lw, lb);
      h = linear_gelu(y, w1, b1);
    } else {
      s = x + d;
      y = layer_norm(s, {c}, lw, lb);
      Tensor pre = linear(y, w1, b1);
      // PyTorch's tanh form, composed.
      h = 0.5 * pre * (1.0 + tanh(0.7978845608028654 * (pre + 0.044715 * pre * pre * pre)));
    }
    Tensor logits = linear(h, w2) + sum(s, {1}, true) * 0.01;  // s used downstream too
    Tensor loss = fused ? cross_entropy(logits, target) : nll_loss(log_softmax(logits, 1), target);
    loss.backward();
    std::vector<Tensor> out = {loss.detach(), logits.detach()};
    for (const Tensor& p : params) out.push_back(p.grad().clone());
    return out;
  };
  std::vector<Tensor> f = run(true), c0 = run(false);
  const char* names[] = {"loss", "logits", "dx", "ddelta", "dweight", "dbias", "dw1", "db1", "dw2"};
  for (size_t i = 0; i < f.size(); ++i) expect_close(f[i], c0[i], 2e-5, 1e-6, names[i]);
}

TEST_P(FusedOpsPaths, GeluTanhMatchesFormula) {
  Tensor x = randn({3, 1000}, 1, kFloat32, 3.0);
  Tensor y = gelu(x, "tanh");
  Tensor g = randn({3, 1000}, 2, kFloat32).detach();
  sum(y * g).backward();
  Tensor xd = x.detach().to(kFloat64).set_requires_grad(true);
  Tensor want = 0.5 * xd * (1.0 + tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
  sum(want * g.to(kFloat64)).backward();
  expect_close(y.detach(), want.detach(), 1e-6, 1e-6, "gelu");
  expect_close(x.grad(), xd.grad(), 1e-6, 1e-6, "gelu grad");
}

COHORT_INSTANTIATE_KERNEL_PATHS(FusedOpsPaths);

}  // namespace
}  // namespace cohort
