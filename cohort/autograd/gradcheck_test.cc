// A finite-difference gradient check for every differentiable op.
#include "cohort/autograd/gradcheck.h"

#include <gtest/gtest.h>

#include <random>

#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"

namespace cohort {
namespace {

using autograd::gradcheck;
using autograd::GradcheckOptions;
using In = const std::vector<Tensor>&;

Tensor randn(const Shape& s, uint64_t seed, DType dt = kFloat64) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = n(g);
  return Tensor::from_vector(v, s).to(dt).set_requires_grad(true);
}

// Values bounded away from 0 (for div, log, sqrt) and from kinks.
Tensor positive(const Shape& s, uint64_t seed) {
  Tensor t = randn(s, seed).detach();
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.5 + std::abs(p[i]);
  return t.set_requires_grad(true);
}

// Values at least `gap` away from 0 (so relu/abs are differentiable there).
Tensor away_from_zero(const Shape& s, uint64_t seed, double gap = 0.1) {
  Tensor t = randn(s, seed).detach();
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] += p[i] >= 0 ? gap : -gap;
  return t.set_requires_grad(true);
}

#define EXPECT_GRADCHECK(...)         \
  do {                                \
    auto r_ = gradcheck(__VA_ARGS__); \
    EXPECT_TRUE(r_.ok) << r_.message; \
  } while (0)

TEST(Gradcheck, DetectsAWrongGradient) {
  // x * x through an op whose backward is deliberately wrong must fail.
  Tensor x = randn({3}, 1);
  auto bad = [](In v) {
    Tensor out = v[0].detach() * 2.0;
    Tensor vd = v[0].detach();
    return autograd::record(out, "bad", {v[0]}, [](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{g * 3.0};
    });
  };
  EXPECT_FALSE(gradcheck(bad, {x}).ok);
}

TEST(Gradcheck, Arithmetic) {
  Tensor a = randn({3, 4}, 1), b = randn({4}, 2), c = positive({3, 1}, 3);
  EXPECT_GRADCHECK([](In v) { return v[0] + v[1]; }, {a, b});
  EXPECT_GRADCHECK([](In v) { return v[0] - v[1]; }, {a, b});
  EXPECT_GRADCHECK([](In v) { return v[0] * v[1]; }, {a, b});
  EXPECT_GRADCHECK([](In v) { return v[0] / v[1]; }, {a, c});
  EXPECT_GRADCHECK([](In v) { return v[0] * v[0]; }, {a});
  EXPECT_GRADCHECK([](In v) { return -v[0] + 2.0; }, {a});
  EXPECT_GRADCHECK([](In v) { return 3.0 - v[0] * 0.5; }, {a});
  EXPECT_GRADCHECK([](In v) { return v[0] / 4.0 - 1.0; }, {a});
  EXPECT_GRADCHECK([](In v) { return 2.0 / v[0]; }, {c});
}

TEST(Gradcheck, Relu) {
  EXPECT_GRADCHECK([](In v) { return relu(v[0]); }, {away_from_zero({4, 5}, 4)});
}

TEST(Gradcheck, Matmul) {
  EXPECT_GRADCHECK([](In v) { return matmul(v[0], v[1]); }, {randn({3, 4}, 1), randn({4, 2}, 2)});
  EXPECT_GRADCHECK([](In v) { return matmul(v[0], v[1]); },
                   {randn({2, 3, 4}, 3), randn({4, 5}, 4)});
  EXPECT_GRADCHECK([](In v) { return matmul(v[0], v[1]); },
                   {randn({2, 1, 3, 4}, 5), randn({3, 4, 2}, 6)});
  EXPECT_GRADCHECK([](In v) { return matmul(v[0], v[1]); }, {randn({4}, 7), randn({4, 3}, 8)});
  EXPECT_GRADCHECK([](In v) { return matmul(v[0], v[1]); }, {randn({2, 4}, 9), randn({4}, 10)});
  EXPECT_GRADCHECK([](In v) { return matmul(v[0], v[1]); }, {randn({4}, 11), randn({4}, 12)});
  // Transposed operand (no copy on the BLAS path).
  EXPECT_GRADCHECK([](In v) { return matmul(transpose(v[0], 0, 1), v[1]); },
                   {randn({4, 3}, 13), randn({4, 2}, 14)});
}

TEST(Gradcheck, Linear) {
  EXPECT_GRADCHECK([](In v) { return linear(v[0], v[1], v[2]); },
                   {randn({5, 3}, 1), randn({4, 3}, 2), randn({4}, 3)});
  EXPECT_GRADCHECK([](In v) { return linear(v[0], v[1]); },
                   {randn({2, 5, 3}, 4), randn({4, 3}, 5)});
}

TEST(Gradcheck, Views) {
  Tensor x = randn({2, 3, 4}, 1);
  EXPECT_GRADCHECK([](In v) { return reshape(v[0], {4, -1}); }, {x});
  EXPECT_GRADCHECK([](In v) { return view(v[0], {6, 4}); }, {x});
  EXPECT_GRADCHECK([](In v) { return flatten(v[0], 1); }, {x});
  EXPECT_GRADCHECK([](In v) { return transpose(v[0], 0, 2) * 1.0; }, {x});
  EXPECT_GRADCHECK([](In v) { return permute(v[0], {2, 0, 1}); }, {x});
  EXPECT_GRADCHECK([](In v) { return unsqueeze(v[0], 1); }, {x});
  EXPECT_GRADCHECK([](In v) { return squeeze(unsqueeze(v[0], -1), -1); }, {x});
  EXPECT_GRADCHECK([](In v) { return squeeze(v[0]); }, {randn({1, 3, 1}, 2)});
  EXPECT_GRADCHECK([](In v) { return narrow(v[0], 2, 1, 2); }, {x});
  EXPECT_GRADCHECK([](In v) { return slice(v[0], 1, -2, 100); }, {x});
  EXPECT_GRADCHECK([](In v) { return select(v[0], 1, 2); }, {x});
  EXPECT_GRADCHECK([](In v) { return expand(v[0], {2, 3, 4}); }, {randn({3, 1}, 3)});
  EXPECT_GRADCHECK([](In v) { return contiguous(transpose(v[0], 0, 1)); }, {x});
  // Views chained with overlapping uses.
  EXPECT_GRADCHECK([](In v) { return select(v[0], 0, 0) * select(v[0], 0, 1); }, {x});
}

TEST(Gradcheck, Reductions) {
  Tensor x = randn({2, 3, 4}, 1);
  EXPECT_GRADCHECK([](In v) { return sum(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return sum(v[0], {1}); }, {x});
  EXPECT_GRADCHECK([](In v) { return sum(v[0], {0, 2}, true); }, {x});
  EXPECT_GRADCHECK([](In v) { return mean(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return mean(v[0], {-1}); }, {x});
  EXPECT_GRADCHECK([](In v) { return mean(v[0], {0}, true); }, {x});
}

TEST(Gradcheck, SoftmaxAndLosses) {
  Tensor x = randn({4, 5}, 1);
  Tensor target = Tensor::from_vector<int64_t>({0, 4, 2, 2});
  EXPECT_GRADCHECK([](In v) { return log_softmax(v[0], 1); }, {x});
  EXPECT_GRADCHECK([](In v) { return log_softmax(v[0], 0); }, {x});
  EXPECT_GRADCHECK([](In v) { return softmax(v[0], -1); }, {x});
  EXPECT_GRADCHECK([](In v) { return softmax(v[0], 0); }, {randn({3, 2, 4}, 9)});
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    EXPECT_GRADCHECK([&](In v) { return nll_loss(log_softmax(v[0], 1), target, r); }, {x});
    EXPECT_GRADCHECK([&](In v) { return nll_loss(v[0], target, r, 2); }, {x});
    EXPECT_GRADCHECK([&](In v) { return mse_loss(v[0], v[1], r); }, {x, randn({4, 5}, 2)});
  }
}

TEST(Gradcheck, Conv2dAndMaxPool) {
  // float32 kernels: coarser differences, looser tolerances.
  GradcheckOptions opt{1e-2, 2e-3, 2e-2, 0};
  Tensor x = randn({2, 3, 7, 6}, 1, kFloat32);
  Tensor w = randn({4, 3, 3, 2}, 2, kFloat32);
  Tensor b = randn({4}, 3, kFloat32);
  EXPECT_GRADCHECK([](In v) { return conv2d(v[0], v[1], v[2]); }, {x, w, b}, opt);
  EXPECT_GRADCHECK([](In v) { return conv2d(v[0], v[1], v[2], {2, 1}, {1, 2}); }, {x, w, b}, opt);
  EXPECT_GRADCHECK([](In v) { return conv2d(v[0], v[1]); }, {x, w}, opt);
  // Pooling: distinct values so the argmax is stable under +-eps.
  std::vector<float> vals(2 * 3 * 6 * 6);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>((i * 37) % 216) * 0.1f;
  Tensor p = Tensor::from_vector(vals, {2, 3, 6, 6}).set_requires_grad(true);
  EXPECT_GRADCHECK([](In v) { return max_pool2d(v[0], {2, 2}); }, {p}, opt);
  EXPECT_GRADCHECK([](In v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {p}, opt);
}

TEST(Gradcheck, Conv2dReluMatchesUnfused) {
  Tensor x = randn({2, 3, 8, 8}, 1, kFloat32);
  Tensor w = randn({5, 3, 3, 3}, 2, kFloat32);
  Tensor b = randn({5}, 3, kFloat32);
  Tensor y1 = conv2d_relu(x, w, b);
  Tensor y2 = relu(conv2d(x, w, b));
  EXPECT_TRUE(allclose(y1, y2, 1e-5, 1e-5));
  sum(y1 * y1).backward();
  Tensor gw1 = w.grad().clone(), gx1 = x.grad().clone();
  w.set_grad(Tensor());
  x.set_grad(Tensor());
  sum(y2 * y2).backward();
  EXPECT_TRUE(allclose(gw1, w.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(allclose(gx1, x.grad(), 1e-4, 1e-4));
}

TEST(Gradcheck, Pointwise) {
  Tensor x = randn({3, 4}, 1), p = positive({3, 4}, 2), z = away_from_zero({3, 4}, 3);
  EXPECT_GRADCHECK([](In v) { return exp(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return log(v[0]); }, {p});
  EXPECT_GRADCHECK([](In v) { return sqrt(v[0]); }, {p});
  EXPECT_GRADCHECK([](In v) { return abs(v[0]); }, {z});
  EXPECT_GRADCHECK([](In v) { return pow(v[0], 3.0); }, {x});
  EXPECT_GRADCHECK([](In v) { return pow(v[0], -0.5); }, {p});
  EXPECT_GRADCHECK([](In v) { return pow(v[0], v[1]); }, {p, randn({4}, 4)});
  EXPECT_GRADCHECK([](In v) { return clamp(v[0], -0.5, 0.7); }, {z});
  EXPECT_GRADCHECK([](In v) { return gelu(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return tanh(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return sigmoid(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return maximum(v[0], v[1]); }, {x, randn({4}, 5)});
  EXPECT_GRADCHECK([](In v) { return minimum(v[0], v[1]); }, {x, randn({3, 1}, 6)});
  Tensor mask = gt(randn({3, 4}, 7).detach(), 0.0);
  EXPECT_GRADCHECK([mask](In v) { return where(mask, v[0], v[1]); }, {x, randn({4}, 8)});
  EXPECT_GRADCHECK([](In v) { return to(v[0], kFloat32) * 1.0; }, {x},
                   GradcheckOptions{1e-3, 1e-3, 1e-2, 0});
}

TEST(Gradcheck, MaxMinGather) {
  Tensor x = randn({3, 4, 5}, 1);
  EXPECT_GRADCHECK([](In v) { return max(v[0], 1).first; }, {x});
  EXPECT_GRADCHECK([](In v) { return max(v[0], -1, true).first; }, {x});
  EXPECT_GRADCHECK([](In v) { return min(v[0], 0).first; }, {x});
  EXPECT_GRADCHECK([](In v) { return max(v[0]); }, {x});
  EXPECT_GRADCHECK([](In v) { return min(v[0]); }, {x});
  Tensor idx = Tensor::from_vector<int64_t>({0, 2, 1, 1, 4, 4}, {3, 2, 1});
  EXPECT_GRADCHECK([idx](In v) { return gather(v[0], 2, idx); }, {randn({3, 2, 5}, 2)});
}

TEST(Gradcheck, EmbeddingCatStack) {
  Tensor w = randn({6, 3}, 1);
  Tensor ids = Tensor::from_vector<int64_t>({1, 5, 1, 0}, {2, 2});
  EXPECT_GRADCHECK([ids](In v) { return embedding(v[0], ids); }, {w});
  EXPECT_GRADCHECK([ids](In v) { return embedding(v[0], ids, 3); }, {w});
  // padding_idx: the row is looked up but gets no gradient (PyTorch semantics).
  Tensor w2 = randn({6, 3}, 9);
  sum(embedding(w2, ids, 1)).backward();
  EXPECT_EQ(w2.grad().select(0, 1).to_vector<double>(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(w2.grad().select(0, 5).to_vector<double>(), (std::vector<double>{1, 1, 1}));
  Tensor a = randn({2, 3}, 2), b = randn({2, 1}, 3), c = randn({2, 3}, 4);
  EXPECT_GRADCHECK([](In v) { return cat({v[0], v[1], v[2]}, 1); }, {a, b, c});
  EXPECT_GRADCHECK([](In v) { return cat({v[0], v[1]}, 0); }, {a, c});
  EXPECT_GRADCHECK([](In v) { return stack({v[0], v[1]}, 1); }, {a, c});
  EXPECT_GRADCHECK([](In v) { return stack({v[0], v[1]}, -1); }, {a, c});
}

TEST(Gradcheck, Dropout) {
  // The mask depends only on the generator state: reseed inside fn.
  Tensor x = randn({4, 5}, 1);
  EXPECT_GRADCHECK(
      [](In v) {
        Generator g(3);
        return dropout(v[0], 0.4, true, g);
      },
      {x});
}

TEST(Gradcheck, LayerNorm) {
  Tensor x = randn({3, 2, 4}, 1);
  EXPECT_GRADCHECK([](In v) { return layer_norm(v[0], {4}, v[1], v[2]); },
                   {x, randn({4}, 2), randn({4}, 3)});
  EXPECT_GRADCHECK([](In v) { return layer_norm(v[0], {2, 4}); }, {x});
}

TEST(Gradcheck, BatchNorm) {
  Tensor x = randn({4, 3, 2, 2}, 1);
  Tensor w = randn({3}, 2), b = randn({3}, 3);
  EXPECT_GRADCHECK([](In v) { return batch_norm(v[0], {}, {}, v[1], v[2], true); }, {x, w, b});
  EXPECT_GRADCHECK([](In v) { return batch_norm(v[0], {}, {}, {}, {}, true); }, {randn({5, 3}, 4)});
  Tensor rm = randn({3}, 5).detach(), rv = positive({3}, 6).detach();
  EXPECT_GRADCHECK([rm, rv](In v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); },
                   {x, w, b});
}

TEST(Gradcheck, CrossEntropy) {
  Tensor x = randn({4, 5}, 1);
  Tensor target = Tensor::from_vector<int64_t>({0, 4, -100, 2});
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone})
    EXPECT_GRADCHECK([&](In v) { return cross_entropy(v[0], target, r); }, {x});
}

}  // namespace
}  // namespace cohort
