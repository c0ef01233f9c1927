// run_backward_split (B now, W later) against run_backward.
#include <gtest/gtest.h>

#include <random>

#include "cohort/autograd/engine.h"

#include "cohort/autograd/autograd_testing.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/autograd_meta.h"

namespace cohort {
namespace {

using autograd::DeferredGradients;
using autograd::run_backward_split;
using autograd::testing::randn;

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what;
  ASSERT_TRUE(b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  for (size_t i = 0; i < va.size(); ++i)
    EXPECT_NEAR(va[i], vb[i], 1e-6f * (1.0f + std::abs(vb[i]))) << what << " [" << i << "]";
}

// A pipeline stage as a test fixture: parameters and a received activation.
struct Mlp {
  std::vector<Tensor> params;  // w1, b1, w2, b2
  Tensor input;                // the stage's received activation

  explicit Mlp(uint64_t seed) {
    params = {randn({16, 8}, seed), randn({16}, seed + 1), randn({4, 16}, seed + 2),
              randn({4}, seed + 3)};
    for (auto& p : params) p.set_requires_grad(true);
    input = randn({5, 8}, seed + 4).set_requires_grad(true);
  }
  Tensor loss() const {
    Tensor h = relu(linear(input, params[0], params[1]));
    Tensor out = log_softmax(linear(h, params[2], params[3]), 1);
    Tensor target = Tensor::from_vector<int64_t>({0, 3, 1, 2, 3});
    return nll_loss(out, target);
  }
};

TEST(EngineSplit, MlpSplitEqualsFullBackward) {
  Mlp full(7), split(7);
  full.loss().backward();

  DeferredGradients w = run_backward_split({split.loss()}, {Tensor()}, {split.input});
  // B: the input's gradient is there, parameter gradients are not yet.
  expect_same(split.input.grad(), full.input.grad(), "input after B");
  for (const auto& p : split.params) EXPECT_FALSE(p.grad().defined());
  EXPECT_FALSE(w.empty());

  w.run();
  EXPECT_TRUE(w.empty());
  for (size_t i = 0; i < full.params.size(); ++i)
    expect_same(split.params[i].grad(), full.params[i].grad(), "param " + std::to_string(i));
  expect_same(split.input.grad(), full.input.grad(), "input after W");
}

TEST(EngineSplit, ConvNetSplitEqualsFullBackward) {
  auto make = [](std::vector<Tensor>& ps, Tensor& x) {
    ps = {randn({4, 2, 3, 3}, 1), randn({4}, 2), randn({3, 4 * 2 * 2}, 3), randn({3}, 4)};
    for (auto& p : ps) p.set_requires_grad(true);
    x = randn({2, 2, 6, 6}, 5).set_requires_grad(true);
  };
  auto loss = [](const std::vector<Tensor>& ps, const Tensor& x) {
    Tensor h = max_pool2d(relu(conv2d(x, ps[0], ps[1], {1, 1}, {1, 1})), {3, 3});
    Tensor logits = linear(flatten(h, 1), ps[2], ps[3]);
    return cross_entropy(logits, Tensor::from_vector<int64_t>({2, 0}));
  };
  std::vector<Tensor> pf, ps;
  Tensor xf, xs;
  make(pf, xf);
  make(ps, xs);
  loss(pf, xf).backward();
  DeferredGradients w = run_backward_split({loss(ps, xs)}, {Tensor()}, {xs});
  expect_same(xs.grad(), xf.grad(), "conv input after B");
  for (const auto& p : ps) EXPECT_FALSE(p.grad().defined());
  w.run();
  for (size_t i = 0; i < pf.size(); ++i)
    expect_same(ps[i].grad(), pf[i].grad(), "conv param " + std::to_string(i));
}

TEST(EngineSplit, OutputGradientAndSeveralRoots) {
  // A non-last stage: the root is an activation with a received gradient;
  // a second root does not lead to the input at all (deferred whole).
  Mlp full(11), split(11);
  Tensor g = randn({5, 16}, 99);
  auto act = [](const Mlp& m) { return relu(linear(m.input, m.params[0], m.params[1])); };
  auto side = [](const Mlp& m) { return sum(m.params[2] * m.params[2]); };
  autograd::run_backward({act(full), side(full)}, {g, Tensor()});
  DeferredGradients w = run_backward_split({act(split), side(split)}, {g, Tensor()}, {split.input});
  expect_same(split.input.grad(), full.input.grad(), "input");
  EXPECT_FALSE(split.params[2].grad().defined());
  w.run();
  for (size_t i = 0; i < 3; ++i)
    expect_same(split.params[i].grad(), full.params[i].grad(), "param " + std::to_string(i));
}

TEST(EngineSplit, EmptyInputsDefersEverything) {
  // A first stage: nothing to send back, so B does nothing.
  Mlp full(3), split(3);
  full.loss().backward();
  DeferredGradients w = run_backward_split({split.loss()}, {Tensor()}, {});
  EXPECT_FALSE(split.input.grad().defined());
  for (const auto& p : split.params) EXPECT_FALSE(p.grad().defined());
  w.run();
  for (size_t i = 0; i < full.params.size(); ++i)
    expect_same(split.params[i].grad(), full.params[i].grad(), "param " + std::to_string(i));
  expect_same(split.input.grad(), full.input.grad(), "input (now through W)");
}

TEST(EngineSplit, SecondRunIsNoOp) {
  Mlp m(5);
  DeferredGradients w = run_backward_split({m.loss()}, {Tensor()}, {m.input});
  w.run();
  std::vector<float> once = m.params[0].grad().to_vector<float>();
  w.run();  // documented: nothing left, nothing happens
  EXPECT_EQ(m.params[0].grad().to_vector<float>(), once);
  DeferredGradients moved = std::move(w);
  EXPECT_TRUE(moved.empty());
  moved.run();
  EXPECT_EQ(m.params[0].grad().to_vector<float>(), once);
}

TEST(EngineSplit, GradReadyHooksFireInW) {
  Mlp m(9);
  int fired = 0;
  GradHookHandle h = m.params[0].register_grad_ready_hook([&](Tensor&) { ++fired; });
  int input_fired = 0;
  GradHookHandle hi = m.input.register_grad_ready_hook([&](Tensor&) { ++input_fired; });
  DeferredGradients w = run_backward_split({m.loss()}, {Tensor()}, {m.input});
  EXPECT_EQ(fired, 0);
  EXPECT_EQ(input_fired, 1);
  w.run();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(input_fired, 1);
}

TEST(EngineSplit, DestroyWithoutRunIsFine) {
  Mlp m(13);
  {
    DeferredGradients w = run_backward_split({m.loss()}, {Tensor()}, {m.input});
    EXPECT_TRUE(m.input.grad().defined());
  }
  for (const auto& p : m.params) EXPECT_FALSE(p.grad().defined());
  // The graph was consumed (or dropped): a fresh forward still works.
  m.loss().backward();
  EXPECT_TRUE(m.params[0].grad().defined());
}

TEST(EngineSplit, InputsMustBeLeavesRequiringGrad) {
  Mlp m(17);
  Tensor h = linear(m.input, m.params[0], m.params[1]);
  EXPECT_THROW(run_backward_split({sum(h)}, {Tensor()}, {h}), InvalidArgument);
  EXPECT_THROW(run_backward_split({sum(h)}, {Tensor()}, {Tensor::ones({2})}), InvalidArgument);
}

TEST(EngineSplit, InputUsedTwiceGetsSummedGradient) {
  // The input feeds two paths, one of them through a parameter: B must sum
  // both into the input's gradient and leave the parameter's for W.
  auto build = [](Tensor& x, Tensor& w) {
    x = randn({3, 4}, 21).set_requires_grad(true);
    w = randn({4, 4}, 22).set_requires_grad(true);
    return sum(matmul(x, w) * x) + sum(tanh(x));
  };
  Tensor xf, wf, xs, ws;
  build(xf, wf).backward();
  Tensor loss = build(xs, ws);
  DeferredGradients d = run_backward_split({loss}, {Tensor()}, {xs});
  expect_same(xs.grad(), xf.grad(), "x");
  EXPECT_FALSE(ws.grad().defined());
  d.run();
  expect_same(ws.grad(), wf.grad(), "w");
}

// A node that cannot run its backward in parts (like DataParallel's): y = x * w
// elementwise, with both gradients computed in one call.
class WholeMul final : public autograd::Node {
 public:
  WholeMul(const Tensor& x, const Tensor& w)
      : Node({autograd::gradient_edge(x), autograd::gradient_edge(w)}),
        x_(x.detach()),
        w_(w.detach()) {}
  std::vector<Tensor> apply(const Tensor& grad) override {
    ++calls;
    return {grad * w_, grad * x_};
  }
  std::string name() const override { return "WholeMul"; }
  int calls = 0;

 private:
  Tensor x_, w_;
};

TEST(EngineSplit, NodeThatCannotSplitRunsWholeInB) {
  auto build = [](Tensor& x, Tensor& w, std::shared_ptr<WholeMul>* node) {
    x = randn({4}, 31).set_requires_grad(true);
    w = randn({4}, 32).set_requires_grad(true);
    Tensor y = (x.detach() * w.detach());
    auto n = std::make_shared<WholeMul>(x, w);
    y.autograd_meta().grad_fn = n;
    if (node) *node = n;
    return sum(tanh(y));
  };
  Tensor xf, wf, xs, ws;
  build(xf, wf, nullptr).backward();
  std::shared_ptr<WholeMul> node;
  Tensor loss = build(xs, ws, &node);
  DeferredGradients d = run_backward_split({loss}, {Tensor()}, {xs});
  EXPECT_EQ(node->calls, 1);
  expect_same(xs.grad(), xf.grad(), "x");
  EXPECT_FALSE(ws.grad().defined());
  d.run();
  EXPECT_EQ(node->calls, 1);  // W used the gradient kept from B
  expect_same(ws.grad(), wf.grad(), "w");
}

}  // namespace
}  // namespace cohort
