#include "cohort/autograd/engine.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "cohort/autograd/gradcheck.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/parallel.h"

namespace cohort {
namespace {

Tensor randn(const Shape& s, uint64_t seed, DType dt = kFloat32) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = n(g);
  return Tensor::from_vector(v, s).to(dt);
}

TEST(Engine, SimpleChainRule) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3}).set_requires_grad(true);
  Tensor y = sum(x * x * 3.0);  // dy/dx = 6x
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(y.grad_fn(), nullptr);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{6, 12, 18}));
  // Accumulates across backward calls.
  sum(x).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{7, 13, 19}));
}

TEST(Engine, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard g;
    EXPECT_FALSE(GradMode::is_enabled());
    y = x * 2.0;
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(sum(y).backward(), InvalidArgument);
}

TEST(Engine, BackwardNeedsScalarOrGrad) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y = x * 2.0;
  EXPECT_THROW(y.backward(), InvalidArgument);
  y.backward(Tensor::from_vector<float>({1, 10}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 20}));
  // The graph was freed.
  EXPECT_THROW(y.backward(Tensor::ones({2})), Error);
}

TEST(Engine, AccumulatesInPlaceIntoExistingGrad) {
  Tensor w = Tensor::ones({3}).set_requires_grad(true);
  Tensor bucket = Tensor::zeros({5});
  Tensor view = bucket.narrow(0, 1, 3);
  w.set_grad(view);
  sum(w * 2.0).backward();
  EXPECT_TRUE(w.grad().is_same(view));
  EXPECT_EQ(bucket.to_vector<float>(), (std::vector<float>{0, 2, 2, 2, 0}));
  sum(w).backward();
  EXPECT_EQ(bucket.to_vector<float>(), (std::vector<float>{0, 3, 3, 3, 0}));
}

TEST(Engine, GradReadyHookFiresOnceAfterFullAccumulation) {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  Tensor x = Tensor::from_vector<float>({1, 2});
  std::vector<std::vector<float>> seen;
  GradHookHandle h = w.register_grad_ready_hook([&](Tensor& t) {
    EXPECT_TRUE(t.is_same(w));
    seen.push_back(t.grad().to_vector<float>());
  });
  // w is used three times; the hook must see the summed gradient once.
  Tensor y = sum(w * x) + sum(w * 3.0) + sum(relu(w));
  y.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{5, 6}));
  h.remove();
  sum(w).backward();
  EXPECT_EQ(seen.size(), 1u);
}

TEST(Engine, HooksFireInReverseUseOrder) {
  // Like DDP: the last layer's parameters become ready first.
  Tensor w1 = randn({4, 3}, 1).set_requires_grad(true);
  Tensor w2 = randn({2, 4}, 2).set_requires_grad(true);
  std::vector<int> order;
  w1.register_grad_ready_hook([&](Tensor&) { order.push_back(1); });
  w2.register_grad_ready_hook([&](Tensor&) { order.push_back(2); });
  Tensor x = randn({5, 3}, 3);
  sum(linear(relu(linear(x, w1)), w2)).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
}

TEST(Engine, HookExceptionPropagates) {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  w.register_grad_ready_hook([](Tensor&) { throw IoError("bucket all_reduce failed"); });
  EXPECT_THROW(sum(w).backward(), IoError);
}

TEST(Engine, InPlaceChangeOfASavedTensorIsReported) {
  Tensor x = Tensor::from_vector<float>({1, -2, 3}).set_requires_grad(true);
  Tensor y = relu(x * 1.0);
  y.mul_(2.0);  // relu saved y for its gradient
  try {
    sum(y).backward();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("relu saved"), std::string::npos) << e.what();
  }
  // Tensors an op does not save may change: add keeps neither operand.
  Tensor w = Tensor::ones({3}).set_requires_grad(true);
  Tensor b = Tensor::ones({3});
  Tensor z = w + b;
  b.fill_(5);
  sum(z).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
  // mul keeps the other operand: changing it is caught.
  Tensor m = w * b;
  b.add_(1.0);
  EXPECT_THROW(sum(m).backward(), Error);
}

TEST(Engine, UnreachableBranchesGetNoGrad) {
  Tensor a = Tensor::ones({2}).set_requires_grad(true);
  Tensor b = Tensor::ones({2}).set_requires_grad(true);
  Tensor c = Tensor::ones({2});
  sum(a * c).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

TEST(Engine, IndependentGraphsOnThreads) {
  // Shared leaf, separate graphs: accumulation must be exact.
  Tensor w = Tensor::zeros({64}).set_requires_grad(true);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 50; ++i) sum(w * 1.0).backward();
    });
  }
  for (auto& t : ts) t.join();
  for (float v : w.grad().to_vector<float>()) ASSERT_EQ(v, 200.0f);
}

// DataParallel's pattern: replicas run forward and backward of the same
// (shared) parameters on threads at once, each with its own thread budget.
TEST(Engine, ConcurrentConvNetStepsOnSharedParameters) {
  Generator gen(1);
  Tensor w1 = randn({4, 1, 3, 3}, 1).set_requires_grad(true);
  Tensor b1 = randn({4}, 2).set_requires_grad(true);
  Tensor w2 = randn({3, 4 * 4 * 4}, 3).set_requires_grad(true);
  std::vector<Tensor> xs{randn({8, 1, 10, 10}, 4), randn({8, 1, 10, 10}, 5)};
  Tensor target = Tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1});
  auto loss_of = [&](const Tensor& x) {
    Tensor h = max_pool2d(conv2d_relu(x, w1, b1), {2, 2});
    return cross_entropy(linear(flatten(h, 1), w2), target);
  };
  // Sequential reference.
  for (const Tensor& x : xs) loss_of(x).backward();
  std::vector<Tensor> want{w1.grad().clone(), b1.grad().clone(), w2.grad().clone()};
  for (int round = 0; round < 3; ++round) {
    for (Tensor p : {w1, b1, w2}) p.set_grad(Tensor());
    std::vector<std::thread> ts;
    for (const Tensor& x : xs)
      ts.emplace_back([&, x] {
        set_num_threads(1);
        loss_of(x).backward();
      });
    for (auto& t : ts) t.join();
    EXPECT_TRUE(allclose(w1.grad(), want[0], 1e-5, 1e-6));
    EXPECT_TRUE(allclose(b1.grad(), want[1], 1e-5, 1e-6));
    EXPECT_TRUE(allclose(w2.grad(), want[2], 1e-5, 1e-6));
  }
}

// The phase-1 acceptance program: Linear -> ReLU -> Linear, MSE, backward,
// every parameter gradient checked against central finite differences.
TEST(Engine, MlpGradientsMatchFiniteDifferences) {
  Tensor x = randn({8, 5}, 11, kFloat64);
  Tensor target = randn({8, 3}, 12, kFloat64);
  Tensor w1 = randn({7, 5}, 13, kFloat64).set_requires_grad(true);
  Tensor b1 = randn({7}, 14, kFloat64).set_requires_grad(true);
  Tensor w2 = randn({3, 7}, 15, kFloat64).set_requires_grad(true);
  Tensor b2 = randn({3}, 16, kFloat64).set_requires_grad(true);
  auto loss_of = [&]() { return mse_loss(linear(relu(linear(x, w1, b1)), w2, b2), target); };
  Tensor loss = loss_of();
  loss.backward();
  const double eps = 1e-6;
  for (Tensor p : {w1, b1, w2, b2}) {
    auto g = p.grad().to_vector<double>();
    double* d = p.data_ptr<double>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      double orig = d[i];
      double fp, fm;
      {
        NoGradGuard ng;
        d[i] = orig + eps;
        fp = loss_of().item<double>();
        d[i] = orig - eps;
        fm = loss_of().item<double>();
        d[i] = orig;
      }
      EXPECT_NEAR(g[i], (fp - fm) / (2 * eps), 1e-6) << "param element " << i;
    }
  }
}

}  // namespace
}  // namespace cohort
