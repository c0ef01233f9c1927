// ZeroRedundancyOptimizer with real processes (cohort::spawn): stage 1 after
// DDP and stage 2 without it reach the parameters of one-process training on
// the whole batch (Adam and SGD with momentum, 10 steps, 2 and 3 ranks), each
// rank's optimizer holding state for its shard only; the sharding balances
// elements and is the same on every rank.
#include "cohort/libtorch/zero_redundancy_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/base/error.h"
#include "cohort/launch/spawn.h"
#include "cohort/libtorch/distributed_data_parallel.h"

namespace cohort::libtorch {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kGlobalBatch = 48;

std::shared_ptr<torch::nn::SequentialImpl> make_mlp(int rank) {
  torch::manual_seed(rank == 0 ? 3 : 300 + rank);
  return std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(12, 32), torch::nn::ReLU(),
                                                     torch::nn::Linear(32, 16), torch::nn::ReLU(),
                                                     torch::nn::Linear(16, 4));
}

std::pair<torch::Tensor, torch::Tensor> batch_of(int step) {
  torch::manual_seed(500 + step);
  return {torch::randn({kGlobalBatch, 12}), torch::randn({kGlobalBatch, 4})};
}

std::unique_ptr<torch::optim::Optimizer> make_opt(bool adam, std::vector<at::Tensor> p) {
  if (adam) return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-2));
  return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9));
}

void run(int rank, int stage, bool adam, int steps) {
  torch::set_num_threads(1);
  auto pg = init_process_group("native", "env://", -1, -1, 60s);
  const int64_t local = kGlobalBatch / pg.size();
  auto model = make_mlp(rank);
  std::unique_ptr<DistributedDataParallel> ddp;
  if (stage == 1) ddp = std::make_unique<DistributedDataParallel>(model, pg);
  if (stage == 2) {  // without DDP the model must start equal: rank 0's, by hand
    torch::NoGradGuard ng;
    for (auto& p : model->parameters()) pg.broadcast(p.detach());
  }
  ZeroRedundancyOptimizer opt(model->parameters(), pg,
                              [&](std::vector<at::Tensor> p) { return make_opt(adam, p); },
                              {.stage = stage});
  const size_t total = model->parameters().size();
  if (opt.local_optimizer().parameters().size() >= total)
    throw Error("the local optimizer holds every parameter");
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    auto xl = x.narrow(0, rank * local, local);
    auto out = ddp ? ddp->forward(xl) : model->forward(xl);
    torch::mse_loss(out, y.narrow(0, rank * local, local)).backward();
    opt.step();
    if (stage == 2)
      for (size_t i = 0; i < total; ++i)
        if (opt.owner(i) != rank && model->parameters()[i].grad().defined())
          throw Error("stage 2 kept a gradient this rank does not own");
  }
  auto ref = make_mlp(0);
  auto ref_opt = make_opt(adam, ref->parameters());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    ref_opt->zero_grad();
    torch::mse_loss(ref->forward(x), y).backward();
    ref_opt->step();
  }
  auto got = model->parameters(), want = ref->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    double d = (got[i] - want[i]).abs().max().item<double>();
    if (!torch::allclose(got[i], want[i], 1e-4, 1e-5))
      throw Error(fmt::format("rank {}: stage {} {}: parameter {} differs by {}", rank, stage,
                              adam ? "Adam" : "SGD", i, d));
  }
  auto g = pg.group();
  distributed::destroy_process_group(g);
}

TEST(LibTorchZero, StageOneAfterDdpMatchesOneProcessWithAdam) {
  spawn([](int rank) { run(rank, 1, true, 10); }, 2);
}

TEST(LibTorchZero, StageTwoMatchesOneProcessWithSgdMomentumAtThreeRanks) {
  spawn([](int rank) { run(rank, 2, false, 10); }, 3);
}

TEST(LibTorchZero, StageTwoMatchesOneProcessWithAdam) {
  spawn([](int rank) { run(rank, 2, true, 10); }, 2);
}

}  // namespace
}  // namespace cohort::libtorch
