#include "cohort/parallel/inter_op/parallel_branches.h"

#include <gtest/gtest.h>

#include "cohort/autograd/grad_mode.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/sequential.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/inter_op/inter_op_test_util.h"

namespace cohort::parallel {
namespace {

using testing::expect_close;
using testing::randn;
using testing::Rendezvous;

// A branch that meets the other branch in forward and in backward, and
// records the intra-op budget it was given.
class Meet : public nn::Cloneable<Meet> {
 public:
  Meet(Rendezvous* fwd, Rendezvous* bwd, std::atomic<int>* met_fwd, std::atomic<int>* met_bwd,
       std::atomic<int>* budget)
      : Cloneable("Meet"),
        fwd_(fwd),
        bwd_(bwd),
        met_fwd_(met_fwd),
        met_bwd_(met_bwd),
        budget_(budget) {}
  Tensor forward(const Tensor& x) override {
    *budget_ = num_threads();
    if (fwd_->arrive_and_wait()) ++*met_fwd_;
    return testing::meet_in_backward(x * 2.0, *bwd_, *met_bwd_);
  }

 private:
  Rendezvous* fwd_;
  Rendezvous* bwd_;
  std::atomic<int>* met_fwd_;
  std::atomic<int>* met_bwd_;
  std::atomic<int>* budget_;
};

class Throwing : public nn::Cloneable<Throwing> {
 public:
  Throwing() : Cloneable("Throwing") {}
  Tensor forward(const Tensor&) override { throw InvalidArgument("Throwing: broken on purpose"); }
};

class Budget : public nn::Cloneable<Budget> {
 public:
  explicit Budget(std::atomic<int>* seen) : Cloneable("Budget"), seen_(seen) {}
  Tensor forward(const Tensor& x) override {
    *seen_ = num_threads();
    return x;
  }

 private:
  std::atomic<int>* seen_;
};

std::shared_ptr<ParallelBranches> two_branch_layer(Generator& gen) {
  auto b1 = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 6, gen), std::make_shared<nn::ReLU>()});
  return std::make_shared<ParallelBranches>(
      std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(8, 4, gen), b1});
}

TEST(ParallelBranches, NamesParametersAsChildren) {
  Generator gen(1);
  auto layer = two_branch_layer(gen);
  std::vector<std::string> names;
  for (auto& [name, p] : layer->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.0.weight", "1.0.bias"}));
  EXPECT_EQ(layer->size(), 2u);
}

TEST(ParallelBranches, MatchesSequentialBranchesOverSgdSteps) {
  Generator gen(2);
  auto layer = two_branch_layer(gen);
  auto head = std::make_shared<nn::Linear>(10, 3, gen);
  auto ref_layer = layer->clone_as<ParallelBranches>();
  auto ref_head = head->clone_as<nn::Linear>();
  std::vector<Tensor> params = layer->parameters(), ref_params = ref_layer->parameters();
  for (auto& p : head->parameters()) params.push_back(p);
  for (auto& p : ref_head->parameters()) ref_params.push_back(p);
  optim::SGD opt(params, {.lr = 0.1});
  optim::SGD ref_opt(ref_params, {.lr = 0.1});
  Tensor target = Tensor::from_vector<int64_t>({0, 2, 1, 1, 0});
  ThreadBudgetGuard budget(2);  // two branch threads, whatever the machine
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({5, 8}, 10 + static_cast<uint64_t>(step));
    Tensor out = head->forward(layer->forward(x));
    // The reference: the same branches one after the other on this thread.
    std::vector<Tensor> ref_outs;
    for (auto& b : ref_layer->children()) ref_outs.push_back(b->forward(x));
    Tensor ref_out = ref_head->forward(cat(ref_outs, 1));
    expect_close(out, ref_out);
    opt.zero_grad();
    ref_opt.zero_grad();
    cross_entropy(out, target).backward();
    cross_entropy(ref_out, target).backward();
    for (size_t i = 0; i < params.size(); ++i) expect_close(params[i].grad(), ref_params[i].grad());
    opt.step();
    ref_opt.step();
  }
  for (size_t i = 0; i < params.size(); ++i) expect_close(params[i], ref_params[i]);
}

TEST(ParallelBranches, JoinModes) {
  Generator gen(3);
  auto a = std::make_shared<nn::Linear>(4, 3, gen);
  auto b = std::make_shared<nn::Linear>(4, 3, gen);
  Tensor x = randn({2, 4}, 4);
  Tensor ya = a->forward(x), yb = b->forward(x);
  ParallelBranches sum_layer({a, b}, {.join = JoinMode::kSum});
  expect_close(sum_layer.forward(x), ya + yb);
  ParallelBranches stack_layer({a, b}, {.join = JoinMode::kStack, .dim = 0});
  EXPECT_EQ(stack_layer.forward(x).sizes(), (Shape{2, 2, 3}));
  expect_close(stack_layer.forward(x), stack({ya, yb}, 0));
  ParallelBranches custom({a, b},
                          {.join_fn = [](const std::vector<Tensor>& v) { return v[0] * v[1]; }});
  expect_close(custom.forward(x), ya * yb);
  EXPECT_EQ(custom.extra_repr(), "join=custom");
}

TEST(ParallelBranches, BranchesRunConcurrentlyInForwardAndBackward) {
  Rendezvous fwd(2), bwd(2);
  std::atomic<int> met_fwd{0}, met_bwd{0}, budget0{0}, budget1{0};
  ParallelBranches layer({std::make_shared<Meet>(&fwd, &bwd, &met_fwd, &met_bwd, &budget0),
                          std::make_shared<Meet>(&fwd, &bwd, &met_fwd, &met_bwd, &budget1)});
  Tensor x = randn({3, 2}, 5).set_requires_grad(true);
  ThreadBudgetGuard budget(4);
  Tensor y = layer.forward(x);
  EXPECT_EQ(met_fwd.load(), 2);
  EXPECT_EQ(budget0.load(), 2);  // 4 threads shared by 2 branches
  EXPECT_EQ(budget1.load(), 2);
  EXPECT_EQ(num_threads(), 4);  // the caller's budget is back
  sum(y).backward();
  EXPECT_EQ(met_bwd.load(), 2);
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(6, 4.0f));
}

TEST(ParallelBranches, BudgetIsTheShareAndAtLeastOne) {
  std::atomic<int> s0{0}, s1{0}, s2{0};
  ParallelBranches layer(
      {std::make_shared<Budget>(&s0), std::make_shared<Budget>(&s1), std::make_shared<Budget>(&s2)},
      {.join = JoinMode::kSum});
  {
    ThreadBudgetGuard budget(7);
    layer.forward(Tensor::ones({1}));
  }
  EXPECT_EQ(s0.load(), 2);
  EXPECT_EQ(s1.load(), 2);
  EXPECT_EQ(s2.load(), 2);
  {
    ThreadBudgetGuard budget(2);
    layer.forward(Tensor::ones({1}));
  }
  EXPECT_EQ(s0.load(), 1);
  EXPECT_EQ(s2.load(), 1);
}

TEST(ParallelBranches, GradModeFollowsTheCaller) {
  Generator gen(6);
  auto layer = two_branch_layer(gen);
  Tensor x = randn({2, 8}, 7);
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(layer->forward(x).requires_grad());
  }
  EXPECT_TRUE(layer->forward(x).requires_grad());
}

TEST(ParallelBranches, ErrorInABranchPropagates) {
  Generator gen(8);
  ParallelBranches layer({std::make_shared<nn::Linear>(4, 2, gen), std::make_shared<Throwing>()});
  try {
    layer.forward(randn({2, 4}, 9));
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("branch 1 (Throwing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("broken on purpose"), std::string::npos);
    EXPECT_THROW(std::rethrow_if_nested(e), InvalidArgument);
  }
  EXPECT_THROW(ParallelBranches({}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
