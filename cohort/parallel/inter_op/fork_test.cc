#include "cohort/parallel/inter_op/fork.h"

#include <gtest/gtest.h>

#include "cohort/autograd/grad_mode.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/inter_op/inter_op_test_util.h"

namespace cohort::parallel {
namespace {

using testing::expect_close;
using testing::randn;
using testing::Rendezvous;

// The tutorial's layer: ops 1 and 2 depend only on x, op 3 on op 1, op 4 on
// ops 2 and 3.
struct FourOps {
  std::vector<Tensor> p;  // w1, b1, w2, w3
  explicit FourOps(uint64_t seed) {
    p = {randn({6, 5}, seed), randn({6}, seed + 1), randn({6, 5}, seed + 2),
         randn({6, 6}, seed + 3)};
    for (auto& t : p) t.set_requires_grad(true);
  }
  Tensor op1(const Tensor& x) const { return linear(x, p[0], p[1]); }
  Tensor op2(const Tensor& x) const { return tanh(linear(x, p[2])); }
  Tensor op3(const Tensor& y1) const { return relu(linear(y1, p[3])); }
  static Tensor op4(const Tensor& y2, const Tensor& y3) { return y2 * y3 + y3; }

  Tensor sequential(const Tensor& x) const { return op4(op2(x), op3(op1(x))); }
  Tensor forked(const Tensor& x) const {
    TensorFuture f = fork([&] { return op3(op1(x)); });
    Tensor y2 = op2(x);
    return op4(y2, f.wait());
  }
};

TEST(Fork, FourOpExampleMatchesSequentialOverSgdSteps) {
  FourOps par(20), seq(20);
  optim::SGD opt(par.p, {.lr = 0.05});
  optim::SGD ref_opt(seq.p, {.lr = 0.05});
  ThreadBudgetGuard budget(2);
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({4, 5}, 30 + static_cast<uint64_t>(step));
    Tensor target = randn({4, 6}, 40 + static_cast<uint64_t>(step));
    Tensor y = par.forked(x), ref_y = seq.sequential(x);
    expect_close(y, ref_y);
    opt.zero_grad();
    ref_opt.zero_grad();
    mse_loss(y, target).backward();
    mse_loss(ref_y, target).backward();
    for (size_t i = 0; i < par.p.size(); ++i) expect_close(par.p[i].grad(), seq.p[i].grad());
    opt.step();
    ref_opt.step();
  }
  for (size_t i = 0; i < par.p.size(); ++i) expect_close(par.p[i], seq.p[i]);
}

TEST(Fork, ForkedTaskRunsBesideTheCallerForwardAndBackward) {
  Rendezvous fwd(2), bwd(2);
  std::atomic<int> met_fwd{0}, met_bwd{0};
  Tensor x = randn({3}, 1).set_requires_grad(true);
  ThreadBudgetGuard budget(2);
  TensorFuture f = fork([&] {
    if (fwd.arrive_and_wait()) ++met_fwd;
    return testing::meet_in_backward(x * 2.0, bwd, met_bwd);
  });
  if (fwd.arrive_and_wait()) ++met_fwd;
  // The caller's side of the backward rendezvous, created while the fork
  // runs; the engine sees the forked nodes' marks and uses two threads.
  Tensor mine = testing::meet_in_backward(x * 3.0, bwd, met_bwd);
  Tensor y = f.wait() + mine;
  EXPECT_EQ(met_fwd.load(), 2);
  sum(y).backward();
  EXPECT_EQ(met_bwd.load(), 2);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 5, 5}));
}

TEST(Fork, GradModeAndBudgetPropagate) {
  ThreadBudgetGuard budget(3);
  auto probe = [] { return std::make_pair(GradMode::is_enabled(), num_threads()); };
  EXPECT_EQ(fork(probe).wait(), std::make_pair(true, 1));
  {
    NoGradGuard no_grad;
    EXPECT_EQ(fork(probe).wait(), std::make_pair(false, 1));
    Tensor w = Tensor::ones({2}).set_requires_grad(true);
    EXPECT_FALSE(fork([&] { return w * 2.0; }).wait().requires_grad());
  }
  EXPECT_EQ(fork(probe, {.num_threads = 1}).wait(), std::make_pair(true, 1));
}

TEST(Fork, TaskAndCallerShareTheBudgetUntilWait) {
  ThreadBudgetGuard budget(4);
  {
    TensorFuture f = fork([] { return Tensor::scalar(num_threads()); });
    EXPECT_EQ(num_threads(), 2);  // the caller's half while the task runs
    EXPECT_EQ(f.wait().item<double>(), 2.0);
    EXPECT_EQ(num_threads(), 4);
    TensorFuture g = fork([] { return Tensor::scalar(0); });
    EXPECT_EQ(num_threads(), 2);
  }  // g destroyed without wait: the budget comes back too
  EXPECT_EQ(num_threads(), 4);
  // An explicit task budget leaves the caller's alone.
  TensorFuture h = fork([] { return Tensor::scalar(num_threads()); }, {.num_threads = 3});
  EXPECT_EQ(num_threads(), 4);
  EXPECT_EQ(h.wait().item<double>(), 3.0);
}

TEST(Fork, ExceptionIsRethrownByWait) {
  TensorFuture f = fork([]() -> Tensor { throw InvalidArgument("op1: broken on purpose"); });
  try {
    f.wait();
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forked task"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("broken on purpose"), std::string::npos);
    EXPECT_THROW(std::rethrow_if_nested(e), InvalidArgument);
  }
  EXPECT_FALSE(f.valid());
  EXPECT_THROW(f.wait(), InvalidArgument);
}

TEST(Fork, DestroyingWithoutWaitJoins) {
  std::atomic<bool> done{false};
  Rendezvous started(2);
  {
    auto f = fork([&] {
      started.arrive_and_wait();
      std::this_thread::yield();
      done = true;
      return 1;
    });
    started.arrive_and_wait();
  }  // joins here
  EXPECT_TRUE(done.load());
  {
    auto f = fork([]() -> int { throw Error("dropped"); });
  }  // an error nobody waits for is dropped, not thrown from the destructor
}

TEST(Fork, MoveAssignmentJoinsThePreviousTask) {
  std::atomic<int> finished{0};
  auto f = fork([&] {
    ++finished;
    return 1;
  });
  f = fork([&] {
    ++finished;
    return 2;
  });
  EXPECT_GE(finished.load(), 1);  // the first task was joined by the assignment
  EXPECT_EQ(f.wait(), 2);
  EXPECT_EQ(finished.load(), 2);
}

}  // namespace
}  // namespace cohort::parallel
