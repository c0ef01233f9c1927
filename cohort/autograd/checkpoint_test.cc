// Activation checkpointing: gradients equal those of the plain graph (inputs
// and parameters, with dropout drawing the same mask), the generators end
// where a plain run leaves them, grad-ready hooks fire once per backward,
// nesting, the split backward, and the errors.
#include "cohort/autograd/checkpoint.h"

#include <gtest/gtest.h>

#include "cohort/autograd/autograd_testing.h"
#include "cohort/autograd/engine.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/base/parallel.h"

namespace cohort::autograd {
namespace {

using testing::randn;

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>(); }

// A two-layer MLP with dropout between the layers, over leaves it does not
// receive as inputs (as a module's parameters are used).
struct Mlp {
  Tensor w1 = randn({16, 8}, 1).set_requires_grad(true);
  Tensor b1 = randn({16}, 2).set_requires_grad(true);
  Tensor w2 = randn({8, 16}, 3).set_requires_grad(true);
  Tensor b2 = randn({8}, 4).set_requires_grad(true);
  Generator gen{11};

  Tensor forward(const Tensor& x) {
    Tensor h = dropout(relu(linear(x, w1, b1)), 0.5, /*training=*/true, gen);
    return linear(h, w2, b2);
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  void zero_grad() {
    for (Tensor p : params()) p.set_grad(Tensor());
  }
};

struct Grads {
  std::vector<Tensor> params;
  Tensor input;
};

// Two stacked MLP calls (the second checkpointed or not), then a loss.
Grads run_mlp(Mlp& m, bool checkpointed) {
  m.zero_grad();
  Tensor x = randn({5, 8}, 7).set_requires_grad(true);
  Tensor h = m.forward(x);
  Tensor y = checkpointed
                 ? checkpoint([&](const std::vector<Tensor>& in) { return m.forward(in[0]); }, {h})
                 : m.forward(h);
  sum(mul(y, y)).backward();
  Grads g;
  for (const Tensor& p : m.params()) g.params.push_back(p.grad().clone());
  g.input = x.grad().clone();
  return g;
}

TEST(Checkpoint, MlpWithDropoutGradientsEqualPlainGraph) {
  Mlp plain, ckpt;
  Grads want = run_mlp(plain, false);
  Grads got = run_mlp(ckpt, true);
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    ASSERT_TRUE(got.params[i].defined()) << "parameter " << i;
    EXPECT_LE(max_abs_diff(got.params[i], want.params[i]), 1e-6) << "parameter " << i;
  }
  EXPECT_LE(max_abs_diff(got.input, want.input), 1e-6);
  // The recomputation replayed the draws without moving the generator on.
  EXPECT_EQ(ckpt.gen.get_state(), plain.gen.get_state());
}

TEST(Checkpoint, RecomputationDrawsTheForwardsDropoutMask) {
  Generator gen(5);
  Tensor x = Tensor::ones({64}).set_requires_grad(true);
  Tensor y = checkpoint(
      [&](const std::vector<Tensor>& in) { return dropout(in[0], 0.5, true, gen); }, {x});
  // A fresh draw now would give another mask; backward must still use y's.
  Tensor other = dropout(Tensor::ones({64}), 0.5, true, gen);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), y.detach().to_vector<float>());
  EXPECT_NE(other.to_vector<float>(), y.detach().to_vector<float>());
}

TEST(Checkpoint, GradReadyHookFiresOncePerBackward) {
  Tensor w = randn({4, 4}, 1).set_requires_grad(true);
  int fired = 0;
  w.register_grad_ready_hook([&](Tensor&) { ++fired; });
  auto region = [&](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w)); };
  for (int step = 1; step <= 2; ++step) {
    Tensor x = randn({3, 4}, 2).set_requires_grad(true);
    // w is used in two checkpointed regions and once outside them.
    Tensor h = checkpoint(region, {x});
    h = checkpoint(region, {h});
    sum(matmul(h, w)).backward();
    EXPECT_EQ(fired, step);
  }
}

TEST(Checkpoint, ParameterGradientsLeaveThroughTheNodesEdges) {
  Tensor w = randn({4, 4}, 1).set_requires_grad(true);
  Tensor x = randn({3, 4}, 2).set_requires_grad(true);
  Tensor y = checkpoint([&](const std::vector<Tensor>& in) { return matmul(in[0], w); }, {x});
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "CheckpointBackward");
  // x's edge, then w's accumulator (what graph walks such as DDP's
  // find_unused_parameters look for).
  ASSERT_EQ(y.grad_fn()->next_edges().size(), 2u);
  EXPECT_EQ(y.grad_fn()->next_edges()[0].node, gradient_edge(x).node);
  EXPECT_EQ(y.grad_fn()->next_edges()[1].node, gradient_edge(w).node);
}

TEST(Checkpoint, TensorsComputedOutsideReceiveTheirGradient) {
  Tensor a = randn({3, 4}, 1).set_requires_grad(true);
  Tensor x = randn({3, 4}, 2).set_requires_grad(true);
  auto run = [&](bool checkpointed) {
    a.set_grad(Tensor());
    x.set_grad(Tensor());
    Tensor scale = exp(a);  // not a leaf, captured by the region
    auto region = [&](const std::vector<Tensor>& in) { return mul(in[0], scale); };
    Tensor y = checkpointed ? checkpoint(region, {x}) : region({x});
    sum(mul(y, y)).backward();
    return std::pair{a.grad().clone(), x.grad().clone()};
  };
  auto [ga, gx] = run(false);
  auto [ca, cx] = run(true);
  EXPECT_LE(max_abs_diff(ca, ga), 1e-6);
  EXPECT_LE(max_abs_diff(cx, gx), 1e-6);
}

TEST(Checkpoint, NestedCheckpointsEqualPlainGraph) {
  Tensor w = randn({4, 4}, 1).set_requires_grad(true);
  Generator gen(3);
  auto inner = [&](const std::vector<Tensor>& in) {
    return dropout(tanh(matmul(in[0], w)), 0.3, true, gen);
  };
  auto run = [&](bool checkpointed) {
    gen.manual_seed(3);
    w.set_grad(Tensor());
    Tensor x = randn({3, 4}, 2).set_requires_grad(true);
    Tensor y;
    if (checkpointed) {
      y = checkpoint(
          [&](const std::vector<Tensor>& in) {
            return checkpoint(inner, {checkpoint(inner, {in[0]})});
          },
          {x});
    } else {
      y = inner({inner({x})});
    }
    sum(y).backward();
    return std::pair{w.grad().clone(), x.grad().clone()};
  };
  auto [gw, gx] = run(false);
  auto [cw, cx] = run(true);
  EXPECT_LE(max_abs_diff(cw, gw), 1e-6);
  EXPECT_LE(max_abs_diff(cx, gx), 1e-6);
}

// Regions made inside concurrent inter-op branches: the engine runs their
// nodes on its threads, each recomputation (and its nested backward) there.
TEST(Checkpoint, RegionsOfConcurrentBranchesEqualPlainGraph) {
  Tensor w = randn({5, 5}, 1).set_requires_grad(true);
  int fired = 0;
  w.register_grad_ready_hook([&](Tensor&) { ++fired; });
  auto run = [&](bool checkpointed) {
    w.set_grad(Tensor());
    Tensor x = randn({4, 5}, 2).set_requires_grad(true);
    std::vector<Generator> gens{Generator(21), Generator(22)};
    const uint64_t seq = next_sequence_nr();
    std::vector<Tensor> outs;
    for (size_t b = 0; b < 2; ++b) {
      ConcurrentBranchScope scope(2, seq);
      auto region = [&, b](const std::vector<Tensor>& in) {
        return dropout(tanh(linear(in[0], w)), 0.4, true, gens[b]);
      };
      outs.push_back(checkpointed ? checkpoint(region, {x}) : region({x}));
    }
    {
      ThreadBudgetGuard budget(2);
      sum(mul(add(outs[0], outs[1]), outs[1])).backward();
    }
    return std::pair{w.grad().clone(), x.grad().clone()};
  };
  auto [gw, gx] = run(false);
  auto [cw, cx] = run(true);
  EXPECT_LE(max_abs_diff(cw, gw), 1e-6);
  EXPECT_LE(max_abs_diff(cx, gx), 1e-6);
  EXPECT_EQ(fired, 2);  // once per backward
}

// The recomputation runs under the precision policy of the forward, even
// when backward runs outside the scope: bf16 products give the bf16 run's
// gradients, not float32 ones.
TEST(Checkpoint, RecomputationRunsUnderTheForwardsPrecisionPolicy) {
  Tensor w = randn({8, 8}, 1).set_requires_grad(true);
  auto region = [&](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w)); };
  auto run = [&](bool checkpointed) {
    w.set_grad(Tensor());
    Tensor x = randn({4, 8}, 2).set_requires_grad(true);
    Tensor loss;
    {
      PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
      Tensor y = checkpointed ? checkpoint(region, {x}) : region({x});
      loss = sum(matmul(y, w));
    }
    loss.backward();  // outside the scope, as the CheckpointNode must not rely on
    return std::pair{w.grad().clone(), x.grad().clone()};
  };
  auto [gw, gx] = run(false);
  auto [cw, cx] = run(true);
  EXPECT_LE(max_abs_diff(cw, gw), 1e-6);
  EXPECT_LE(max_abs_diff(cx, gx), 1e-6);
}

TEST(Checkpoint, SplitBackwardGivesTheSameGradients) {
  Tensor w = randn({4, 4}, 1).set_requires_grad(true);
  auto region = [&](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w)); };
  Tensor x0 = randn({3, 4}, 2);
  Tensor x = x0.detach().set_requires_grad(true);
  sum(region({x})).backward();
  Tensor want_w = w.grad().clone(), want_x = x.grad().clone();
  w.set_grad(Tensor());
  Tensor xs = x0.detach().set_requires_grad(true);
  Tensor y = checkpoint(region, {xs});
  DeferredGradients deferred = run_backward_split({sum(y)}, {Tensor()}, {xs});
  EXPECT_LE(max_abs_diff(xs.grad(), want_x), 1e-6);
  EXPECT_FALSE(w.grad().defined());  // W's half
  deferred.run();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_LE(max_abs_diff(w.grad(), want_w), 1e-6);
}

TEST(Checkpoint, WithoutGradModeRunsFnAndRecordsNothing) {
  Tensor x = randn({3}, 1).set_requires_grad(true);
  int calls = 0;
  Tensor y;
  {
    NoGradGuard no_grad;
    y = checkpoint(
        [&](const std::vector<Tensor>& in) {
          ++calls;
          return mul(in[0], 2.0);
        },
        {x});
  }
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, InputsThatNeedNoGradGetNone) {
  Tensor w = randn({4}, 1).set_requires_grad(true);
  Tensor c = randn({4}, 2);  // a constant input
  Tensor y = checkpoint([&](const std::vector<Tensor>& in) { return mul(in[0], w); }, {c});
  sum(y).backward();
  EXPECT_FALSE(c.grad().defined());
  EXPECT_LE(max_abs_diff(w.grad(), c), 1e-6);
}

TEST(Checkpoint, SecondBackwardThrows) {
  Tensor x = randn({3}, 1).set_requires_grad(true);
  Tensor y = checkpoint([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {x});
  Tensor loss = sum(y);
  loss.backward();
  EXPECT_THROW(loss.backward(), Error);
}

TEST(Checkpoint, InputModifiedInPlaceBeforeBackwardThrows) {
  Tensor x = randn({3}, 1).set_requires_grad(true);
  Tensor h = mul(x, 1.0);
  Tensor y = checkpoint([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {h});
  {
    NoGradGuard no_grad;
    h.add_(1.0);
  }
  try {
    sum(y).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, RecomputationOfAnotherShapeThrows) {
  Tensor x = randn({4}, 1).set_requires_grad(true);
  int calls = 0;
  Tensor y = checkpoint(
      [&](const std::vector<Tensor>& in) { return ++calls == 1 ? mul(in[0], 2.0) : sum(in[0]); },
      {x});
  try {
    sum(y).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same function"), std::string::npos) << e.what();
  }
}

// ---- the engine's grad(), which the recomputation runs ----

TEST(EngineGrad, ReturnsGradientsWithoutAccumulatingOrFiringHooks) {
  Tensor w = randn({3}, 1).set_requires_grad(true);
  Tensor x = randn({3}, 2).set_requires_grad(true);
  int fired = 0;
  w.register_grad_ready_hook([&](Tensor&) { ++fired; });
  Tensor h = mul(x, 2.0);  // a non-leaf input
  Tensor y = sum(mul(mul(h, h), w));
  std::vector<Tensor> g = grad({y}, {Tensor()}, {w, h});
  ASSERT_EQ(g.size(), 2u);
  ASSERT_TRUE(g[0].defined() && g[1].defined());
  // dy/dw = h^2; dy/dh = 2 h w.
  EXPECT_LE(max_abs_diff(g[0], mul(h.detach(), h.detach())), 1e-6);
  EXPECT_LE(max_abs_diff(g[1], mul(mul(h.detach(), w.detach()), 2.0)), 1e-6);
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());  // behind the input h: not run
  EXPECT_EQ(fired, 0);
}

TEST(EngineGrad, InputThatDoesNotRequireGradThrows) {
  Tensor x = randn({3}, 2).set_requires_grad(true);
  EXPECT_THROW(grad({sum(x)}, {Tensor()}, {randn({3}, 1)}), Error);
}

}  // namespace
}  // namespace cohort::autograd
