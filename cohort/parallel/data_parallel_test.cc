// DataParallel against the unwrapped module on the whole batch: outputs,
// parameter gradients and input gradients for 1..4 replicas, batches that do
// not divide evenly and batches smaller than the replica count; 20 SGD steps
// of Net against single-replica training; buffers; torch.chunk's split.
#include "cohort/parallel/data_parallel.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/parallel.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"

namespace cohort::parallel {
namespace {

void expect_close(const Tensor& a, const Tensor& b, const std::string& what, double rtol = 1e-4,
                  double atol = 1e-5) {
  ASSERT_TRUE(a.defined()) << what << ": undefined";
  ASSERT_TRUE(b.defined()) << what << ": reference undefined";
  EXPECT_TRUE(allclose(a, b, rtol, atol)) << what << "\n got " << a << "\n want " << b;
}

// Runs forward+backward of `loss_of(model(x))` on the unwrapped clone and on
// DataParallel(model, n), comparing output, parameter grads and input grad.
void check_equivalent(const nn::ModulePtr& model, const Tensor& x_data, int n,
                      const std::function<Tensor(const Tensor&)>& loss_of) {
  nn::ModulePtr ref = model->clone();
  Tensor x_ref = x_data.clone().set_requires_grad(true);
  Tensor out_ref = ref->forward(x_ref);
  loss_of(out_ref).backward();

  DataParallel dp(model, n);
  model->zero_grad(true);
  Tensor x = x_data.clone().set_requires_grad(true);
  Tensor out = dp.forward(x);
  std::string tag = fmt::format("n={} batch={}", n, x_data.size(0));
  expect_close(out, out_ref, tag + " output");
  loss_of(out).backward();
  auto got = model->named_parameters();
  auto want = ref->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i].second.grad(), want[i].second.grad(), tag + " grad " + got[i].first);
  expect_close(x.grad(), x_ref.grad(), tag + " input grad");
}

TEST(DataParallel, ChunkSizesFollowTorchChunk) {
  EXPECT_EQ(DataParallel::chunk_sizes(30, 8), (std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 2}));
  EXPECT_EQ(DataParallel::chunk_sizes(9, 4), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(DataParallel::chunk_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(DataParallel::chunk_sizes(2, 4), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(DataParallel::chunk_sizes(8, 1), (std::vector<int64_t>{8}));
}

TEST(DataParallel, ToyModelMatchesUnwrappedForOneToFourReplicas) {
  for (int n = 1; n <= 4; ++n) {
    for (int64_t batch : {int64_t{4} * n, int64_t{4} * n + 1, int64_t{n > 1 ? n - 1 : 1}}) {
      Generator gen(7 + n);
      auto model = std::make_shared<nn::ToyModel>(gen);
      Tensor x = randn({batch, 10}, gen);
      Tensor y = randn({batch, 5}, gen);
      check_equivalent(model, x, n, [&](const Tensor& out) { return mse_loss(out, y); });
    }
  }
}

TEST(DataParallel, NetMatchesUnwrapped) {
  for (int n : {2, 3}) {
    for (int64_t batch : {int64_t{7}, int64_t{n} - 1}) {
      Generator gen(11);
      auto model = std::make_shared<nn::Net>(gen);
      Tensor x = rand({batch, 1, 28, 28}, gen);
      Tensor y = randint(0, 10, {batch}, gen);
      check_equivalent(model, x, n, [&](const Tensor& out) { return nll_loss(out, y); });
    }
  }
}

// Scales its input elementwise by a [1, C] weight: any dim can be the batch.
class Scale : public nn::Cloneable<Scale> {
 public:
  explicit Scale(Generator& gen) : Cloneable("Scale") {
    register_parameter("weight", randn({5, 1}, gen));
  }
  Tensor forward(const Tensor& x) override { return mul(tanh(x), param(0)); }
};

TEST(DataParallel, SplitsAndGathersAlongDim) {
  Generator gen(4);
  auto model = std::make_shared<Scale>(gen);
  Tensor x_data = randn({5, 7}, gen);  // batch along dim 1
  Tensor w = randn({5, 7}, gen);
  nn::ModulePtr ref = model->clone();
  Tensor xr = x_data.clone().set_requires_grad(true);
  sum(mul(ref->forward(xr), w)).backward();
  DataParallel dp(model, DataParallelOptions{.device_ids = {0, 1, 2}, .dim = 1});
  model->zero_grad(true);
  Tensor x = x_data.clone().set_requires_grad(true);
  Tensor out = dp.forward(x);
  expect_close(out, ref->forward(x_data), "dim=1 output");
  sum(mul(out, w)).backward();
  expect_close(model->parameter("weight").grad(), ref->parameter("weight").grad(), "dim=1 grad");
  expect_close(x.grad(), xr.grad(), "dim=1 input grad");
}

TEST(DataParallel, EachReplicaGetsItsChunk) {
  Generator gen(3);
  auto model = std::make_shared<nn::ASimpleNet>(gen);
  std::mutex mu;
  std::multiset<int64_t> seen;
  model->set_reporter([&](int64_t b) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(b);
  });
  DataParallel dp(model, 4);
  Tensor out = dp.forward(randn({30, 3}, gen));
  EXPECT_EQ(out.sizes(), (Shape{30, 3}));
  EXPECT_EQ(seen, (std::multiset<int64_t>{8, 8, 8, 6}));
  seen.clear();
  dp.forward(randn({3, 3}, gen));
  EXPECT_EQ(seen, (std::multiset<int64_t>{1, 1, 1}));
}

TEST(DataParallel, ReplicasRunConcurrently) {
  // Each replica's forward waits until all 3 have started; run one after
  // another, the first would wait in vain (bounded wait, then the test fails).
  Generator gen(3);
  auto model = std::make_shared<nn::ASimpleNet>(gen);
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool all_met = true;
  model->set_reporter([&](int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return started >= 3; })) all_met = false;
  });
  DataParallel dp(model, 3);
  dp.forward(randn({9, 3}, gen));
  EXPECT_TRUE(all_met);
  EXPECT_EQ(started, 3);
}

TEST(DataParallel, ReplicasRunWithTheirThreadBudget) {
  ThreadBudgetGuard guard(6);
  Generator gen(3);
  auto model = std::make_shared<nn::ASimpleNet>(gen);
  std::mutex mu;
  std::multiset<int> budgets;
  model->set_reporter([&](int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    budgets.insert(num_threads());
  });
  DataParallel dp(model, 4);
  EXPECT_EQ(
      dp.replica_threads(0) + dp.replica_threads(1) + dp.replica_threads(2) + dp.replica_threads(3),
      6);
  dp.forward(randn({8, 3}, gen));
  EXPECT_EQ(budgets, (std::multiset<int>{1, 1, 2, 2}));
  EXPECT_EQ(num_threads(), 6);  // the caller's budget is restored
}

TEST(DataParallel, NoGraphUnderNoGrad) {
  Generator gen(5);
  auto model = std::make_shared<nn::ToyModel>(gen);
  DataParallel dp(model, 2);
  Tensor x = randn({5, 10}, gen);
  NoGradGuard no_grad;
  Tensor out = dp.forward(x);
  EXPECT_FALSE(out.requires_grad());
  expect_close(out, model->forward(x), "no-grad output");
}

// The replicas compute under the caller's precision policy: each chunk's
// output equals the unwrapped model's under the same bf16 policy, and differs
// from its float32 output by far more than float32 rounding.
TEST(DataParallel, ReplicasInheritThePrecisionPolicy) {
  Generator gen(6);
  auto model = std::make_shared<nn::ToyModel>(gen);
  DataParallel dp(model, 2);
  Tensor x = randn({8, 10}, gen);
  Tensor fp32 = model->forward(x);
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  Tensor out = dp.forward(x), want = model->forward(x);
  EXPECT_TRUE(allclose(out, want, 1e-6, 1e-6));
  EXPECT_FALSE(allclose(out.narrow(0, 4, 4), fp32.narrow(0, 4, 4), 1e-5, 1e-5));
}

TEST(DataParallel, BuffersComeFromReplicaZero) {
  Generator gen(9);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 4, gen), std::make_shared<nn::BatchNorm1d>(4)});
  auto ref = model->clone();
  DataParallel dp(model, 2);
  Tensor x = randn({8, 4}, gen);
  dp.forward(x);
  ref->forward(x.narrow(0, 0, 4));  // replica 0's chunk
  auto got = model->named_buffers();
  auto want = ref->named_buffers();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i].second, want[i].second, "buffer " + got[i].first);
}

TEST(DataParallel, RejectsBadOptions) {
  Generator gen(1);
  auto model = std::make_shared<nn::ToyModel>(gen);
  EXPECT_THROW(DataParallel(model, DataParallelOptions{.device_ids = {0, 0}}), InvalidArgument);
  EXPECT_THROW(DataParallel(model, DataParallelOptions{.device_ids = {0, 1}, .output_device = 3}),
               InvalidArgument);
  EXPECT_THROW(DataParallel(model, 0), InvalidArgument);
  DataParallel dp(model, 2);
  EXPECT_THROW(dp.forward(Tensor::zeros({0, 10})), InvalidArgument);
  // A replica's exception reaches the caller, and the pool stays usable.
  EXPECT_THROW(dp.forward(Tensor::zeros({4, 7})), InvalidArgument);
  EXPECT_EQ(dp.forward(Tensor::zeros({4, 10})).sizes(), (Shape{4, 5}));
}

TEST(DataParallel, TrainingNetMatchesSingleReplica) {
  Generator gen(21);
  auto model = std::make_shared<nn::Net>(gen);
  nn::ModulePtr ref = model->clone();
  DataParallel dp(model, 2);
  optim::SGD opt(dp.parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::SGD opt_ref(ref->parameters(), {.lr = 0.01, .momentum = 0.9});
  for (int step = 0; step < 20; ++step) {
    Tensor x = rand({64, 1, 28, 28}, gen);
    Tensor y = randint(0, 10, {64}, gen);
    opt.zero_grad();
    nll_loss(dp.forward(x), y).backward();
    opt.step();
    opt_ref.zero_grad();
    nll_loss(ref->forward(x), y).backward();
    opt_ref.step();
  }
  auto got = model->named_parameters();
  auto want = ref->named_parameters();
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i].second, want[i].second, "after 20 steps: " + got[i].first, 1e-3, 1e-4);
}

}  // namespace
}  // namespace cohort::parallel
