// ZeroRedundancyOptimizer with real processes (cohort::spawn): stage 1 after
// DDP and stage 2 without it reach the parameters of one-process training on
// the whole batch (Adam and SGD with momentum, 10 steps, 2 and 3 ranks), each
// rank's optimizer holding state for its shard only; the sharding balances
// elements and is the same on every rank. ZeRO equals DDP with the full
// optimizer over 20 Adam steps at 2 and 4 ranks for stage 1, stage 2 and
// stage 2 overlapped with backward (whose hooks launch every reduction before
// backward returns and drop the gradients the rank does not own).
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

struct VsDdp {
  int stage = 1;
  bool overlap = false;
  int steps = 20;
};

// Each rank trains two copies of the model on the same shards: one under DDP
// with the full Adam, one with ZeRO; their parameters must agree.
void run_vs_ddp(int rank, const VsDdp& v) {
  torch::set_num_threads(1);
  auto pg = init_process_group("native", "env://", -1, -1, 60s);
  const int64_t local = kGlobalBatch / pg.size();
  auto ddp_model = make_mlp(rank);
  DistributedDataParallel ddp(ddp_model, pg);
  auto ddp_opt = make_opt(true, ddp_model->parameters());
  auto model = make_mlp(rank);
  std::unique_ptr<DistributedDataParallel> zero_ddp;
  if (v.stage == 1) {
    zero_ddp = std::make_unique<DistributedDataParallel>(model, pg);
  } else {
    torch::NoGradGuard ng;
    for (auto& p : model->parameters()) pg.broadcast(p.detach());
  }
  ZeroRedundancyOptimizer opt(model->parameters(), pg,
                              [&](std::vector<at::Tensor> p) { return make_opt(true, p); },
                              {.stage = v.stage, .overlap_with_backward = v.overlap});
  const size_t total = model->parameters().size();
  for (int s = 0; s < v.steps; ++s) {
    auto [x, y] = batch_of(s);
    auto xl = x.narrow(0, rank * local, local);
    auto yl = y.narrow(0, rank * local, local);
    ddp_opt->zero_grad();
    torch::mse_loss(ddp.forward(xl), yl).backward();
    ddp_opt->step();
    opt.zero_grad();
    torch::mse_loss(zero_ddp ? zero_ddp->forward(xl) : model->forward(xl), yl).backward();
    if (v.overlap) {
      // Every reduction was issued by the hooks while backward ran (nothing
      // else ran in between), and the gradients of others' shards are gone.
      if (opt.reductions_launched_in_backward() != total)
        throw Error(fmt::format("rank {}: {} of {} reductions launched in backward", rank,
                                opt.reductions_launched_in_backward(), total));
      for (size_t i = 0; i < total; ++i)
        if (opt.owner(i) != rank && model->parameters()[i].grad().defined())
          throw Error("overlap kept a gradient this rank does not own");
    }
    opt.step();
  }
  auto got = model->parameters(), want = ddp_model->parameters();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, (got[i] - want[i]).abs().max().item<double>());
    if (!torch::allclose(got[i], want[i], 1e-4, 1e-5))
      throw Error(fmt::format("rank {}: stage {} overlap {}: parameter {} differs from DDP's by {}",
                              rank, v.stage, v.overlap, i,
                              (got[i] - want[i]).abs().max().item<double>()));
  }
  std::printf("rank %d: stage %d overlap %d, %d ranks: max |diff| to DDP %.3g\n", rank, v.stage,
              int(v.overlap), pg.size(), worst);
  auto g = pg.group();
  distributed::destroy_process_group(g);
}

TEST(LibTorchZero, StageOneEqualsDdpOverTwentyStepsAtTwoAndFourRanks) {
  for (int n : {2, 4}) spawn([](int rank) { run_vs_ddp(rank, {.stage = 1}); }, n);
}

TEST(LibTorchZero, StageTwoEqualsDdpOverTwentyStepsAtTwoAndFourRanks) {
  for (int n : {2, 4}) spawn([](int rank) { run_vs_ddp(rank, {.stage = 2}); }, n);
}

TEST(LibTorchZero, StageTwoOverlappedWithBackwardEqualsDdpOverTwentyStepsAtTwoAndFourRanks) {
  for (int n : {2, 4}) spawn([](int rank) { run_vs_ddp(rank, {.stage = 2, .overlap = true}); }, n);
}

TEST(LibTorchZero, OverlapRejectsASecondBackwardBeforeStepAndStageOne) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = init_process_group("native", "env://", -1, -1, 60s);
        auto model = make_mlp(0);
        auto factory = [](std::vector<at::Tensor> p) { return make_opt(false, p); };
        try {
          ZeroRedundancyOptimizer bad(model->parameters(), pg, factory,
                                      {.stage = 1, .overlap_with_backward = true});
          throw Error("stage 1 accepted overlap_with_backward");
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("stage 2") == std::string::npos)
            throw Error(std::string("message does not say stage 2: ") + e.what());
        }
        ZeroRedundancyOptimizer opt(model->parameters(), pg, factory,
                                    {.stage = 2, .overlap_with_backward = true});
        auto [x, y] = batch_of(0);
        torch::mse_loss(model->forward(x), y).backward();
        try {
          torch::mse_loss(model->forward(x), y).backward();
          throw Error("a second backward before step() was accepted");
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("second gradient") == std::string::npos)
            throw Error(std::string("message does not name the second gradient: ") + e.what());
        }
        opt.step();  // the first backward's reductions still complete the step
        if (opt.reductions_launched_in_backward() != 0) throw Error("step() did not reset");
        (void)rank;
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
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
