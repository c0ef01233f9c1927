// The engine on graphs made by concurrent branches (ConcurrentBranchScope):
// same gradients as the single-threaded engine, nodes of different branches
// really run at once, budgets are shared, errors propagate.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>

#include "cohort/autograd/engine.h"

#include "cohort/autograd/autograd_testing.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/parallel.h"

namespace cohort {
namespace {

using autograd::ConcurrentBranchScope;

void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what;
  ASSERT_TRUE(b.defined()) << what;
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  ASSERT_EQ(va.size(), vb.size()) << what;
  for (size_t i = 0; i < va.size(); ++i)
    EXPECT_NEAR(va[i], vb[i], 1e-5f * (1.0f + std::abs(vb[i]))) << what << " [" << i << "]";
}

using autograd::testing::randn;
using autograd::testing::Rendezvous;

// y = x (identity) whose backward first meets the other branches' backwards.
Tensor meet_in_backward(const Tensor& x, Rendezvous& r, std::atomic<int>& met,
                        std::atomic<int>& budget_seen) {
  Tensor out = x.detach().clone();
  return autograd::record(out, "MeetBackward", {x},
                          [&r, &met, &budget_seen](const Tensor& g, const std::vector<bool>&) {
                            budget_seen = num_threads();
                            if (r.arrive_and_wait()) ++met;
                            return std::vector<Tensor>{g};
                          });
}

struct Model {
  std::vector<Tensor> w;  // one weight per branch
  Tensor x;
  Model(int branches, uint64_t seed) {
    for (int b = 0; b < branches; ++b)
      w.push_back(randn({6, 5}, seed + static_cast<uint64_t>(b)).set_requires_grad(true));
    x = randn({4, 5}, seed + 100).set_requires_grad(true);
  }
  // Each branch: tanh(x W_b^T) then a few more ops; outputs concatenated.
  Tensor loss(bool concurrent) {
    const int k = static_cast<int>(w.size());
    std::vector<Tensor> outs;
    const uint64_t seq = autograd::next_sequence_nr();
    for (int b = 0; b < k; ++b) {
      std::optional<ConcurrentBranchScope> scope;
      if (concurrent) scope.emplace(k, seq);
      Tensor h = tanh(linear(x, w[static_cast<size_t>(b)]));
      outs.push_back(relu(h * 2.0) + sigmoid(h));
    }
    return sum(cat(outs, 1) * cat(outs, 1));
  }
};

TEST(EngineConcurrent, PlainGraphsAreNotMarked) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y = x * 2.0;
  EXPECT_EQ(y.grad_fn()->concurrent_branches(), 1);
  {
    ConcurrentBranchScope outer(2, autograd::next_sequence_nr());
    ConcurrentBranchScope inner(3, autograd::next_sequence_nr());
    EXPECT_EQ((x * 3.0).grad_fn()->concurrent_branches(), 6);
  }
  EXPECT_EQ(autograd::current_concurrent_branches(), 1);
}

TEST(EngineConcurrent, BranchGradientsEqualSingleThreaded) {
  for (int branches : {2, 3, 5}) {
    Model serial(branches, 40), conc(branches, 40);
    serial.loss(false).backward();
    {
      ThreadBudgetGuard budget(4);
      conc.loss(true).backward();
    }
    expect_close(conc.x.grad(), serial.x.grad(), "x");
    for (int b = 0; b < branches; ++b)
      expect_close(conc.w[static_cast<size_t>(b)].grad(), serial.w[static_cast<size_t>(b)].grad(),
                   "w" + std::to_string(b));
  }
}

TEST(EngineConcurrent, BranchBackwardsRunAtTheSameTime) {
  // Both backwards must meet: possible only when they run at once.
  Rendezvous r(2);
  std::atomic<int> met{0}, budget0{0}, budget1{0};
  Tensor x = randn({3}, 1).set_requires_grad(true);
  const uint64_t seq = autograd::next_sequence_nr();
  Tensor a, b;
  {
    ConcurrentBranchScope s(2, seq);
    a = meet_in_backward(x * 2.0, r, met, budget0);
  }
  {
    ConcurrentBranchScope s(2, seq);
    b = meet_in_backward(x * 3.0, r, met, budget1);
  }
  {
    ThreadBudgetGuard budget(4);
    sum(a + b).backward();
  }
  EXPECT_EQ(met.load(), 2);
  // Two branch threads share the caller's budget of 4.
  EXPECT_EQ(budget0.load(), 2);
  EXPECT_EQ(budget1.load(), 2);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 5, 5}));
}

TEST(EngineConcurrent, BudgetOfOneKeepsOneThread) {
  // Budget 1: no extra threads, so nothing may run beside anything else.
  Model serial(3, 7), conc(3, 7);
  serial.loss(false).backward();
  {
    ThreadBudgetGuard budget(1);
    conc.loss(true).backward();
  }
  for (size_t b = 0; b < 3; ++b) expect_close(conc.w[b].grad(), serial.w[b].grad(), "w");
}

TEST(EngineConcurrent, ExceptionInABranchPropagates) {
  Tensor x = randn({3}, 2).set_requires_grad(true);
  const uint64_t seq = autograd::next_sequence_nr();
  Tensor a, b;
  {
    ConcurrentBranchScope s(2, seq);
    Tensor out = (x * 2.0).detach().clone();
    a = autograd::record(out, "FailingBackward", {x * 2.0},
                         [](const Tensor&, const std::vector<bool>&) -> std::vector<Tensor> {
                           throw InvalidArgument("FailingBackward: broken on purpose");
                         });
  }
  {
    ConcurrentBranchScope s(2, seq);
    b = tanh(x * 3.0);
  }
  ThreadBudgetGuard budget(2);
  try {
    sum(a + b).backward();
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("broken on purpose"), std::string::npos);
  }
}

TEST(EngineConcurrent, SplitBackwardOnBranches) {
  Model full(3, 60), split(3, 60);
  full.loss(false).backward();
  ThreadBudgetGuard budget(3);
  Tensor loss = split.loss(true);
  autograd::DeferredGradients w = autograd::run_backward_split({loss}, {Tensor()}, {split.x});
  expect_close(split.x.grad(), full.x.grad(), "x after B");
  for (const auto& p : split.w) EXPECT_FALSE(p.grad().defined());
  w.run();
  for (size_t b = 0; b < 3; ++b) expect_close(split.w[b].grad(), full.w[b].grad(), "w");
}

TEST(EngineConcurrent, HooksAreNeverCalledConcurrently) {
  Model m(4, 80);
  std::atomic<int> inside{0}, overlaps{0}, calls{0};
  std::vector<GradHookHandle> handles;
  for (auto& p : m.w) {
    handles.push_back(p.register_grad_ready_hook([&](Tensor&) {
      if (++inside > 1) ++overlaps;
      ++calls;
      std::this_thread::yield();
      --inside;
    }));
  }
  ThreadBudgetGuard budget(4);
  m.loss(true).backward();
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(overlaps.load(), 0);
}

}  // namespace
}  // namespace cohort
