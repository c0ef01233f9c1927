// cohort::libtorch::DistributedDataParallel with the communication hooks of
// cohort/parallel/comm_hooks/, with real processes: through the hook path the
// allreduce hook matches one-process training, fp16 halves its bytes, a
// second registration is refused, and PowerSGD (rank 2, from step 2) keeps
// the replicas identical while the loss falls, with fewer bytes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/base/error.h"
#include "cohort/launch/spawn.h"
#include "cohort/libtorch/distributed_data_parallel.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/comm_hooks/compression_hooks.h"
#include "cohort/parallel/comm_hooks/powersgd_hook.h"

namespace cohort::libtorch {
namespace {

using namespace std::chrono_literals;

struct Mlp : torch::nn::Module {
  Mlp()
      : fc1(register_module("fc1", torch::nn::Linear(32, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 8))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};

// Step `step`'s 32 samples of a fixed linear teacher (the same on every rank).
std::pair<torch::Tensor, torch::Tensor> batch_of(int step) {
  torch::manual_seed(77);
  torch::Tensor teacher = torch::randn({32, 8});
  torch::manual_seed(1000 + step);
  torch::Tensor x = torch::randn({32, 32});
  return {x, x.matmul(teacher)};
}

struct TrainRun {
  std::vector<torch::Tensor> params;
  std::vector<double> losses;
  std::vector<size_t> step_bytes;
};

// `steps` SGD steps; with `world` 1, one process on the whole batch.
TrainRun train(ProcessGroup* pg, parallel::CommHookPtr hook, int steps) {
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg != nullptr) {
    ddp = std::make_unique<DistributedDataParallel>(
        model, *pg, DistributedDataParallelOptions{.bucket_cap_mb = 0.001});
    if (hook) ddp->register_comm_hook(hook);
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
  const int world = pg ? pg->size() : 1, rank = pg ? pg->rank() : 0;
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    const int64_t local = x.size(0) / world;
    x = x.narrow(0, rank * local, local);
    y = y.narrow(0, rank * local, local);
    opt.zero_grad();
    auto out = ddp ? ddp->forward(x) : model->forward(x);
    auto loss = torch::mse_loss(out, y);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
    r.step_bytes.push_back(ddp ? ddp->reduced_bytes() : 0);
  }
  for (auto& p : model->parameters()) r.params.push_back(p.detach().clone());
  return r;
}

ProcessGroup join() {
  torch::set_num_threads(1);
  return init_process_group("native", "env://", -1, -1, 60s);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

TEST(LibTorchDDPCommHook, AllreduceHookMatchesOneProcessAndFp16HalvesTheBytes) {
  spawn(
      [](int rank) {
        auto pg = join();
        const TrainRun want = train(nullptr, nullptr, 10);
        const TrainRun got = train(&pg, parallel::allreduce_hook(), 10);
        for (size_t i = 0; i < want.params.size(); ++i)
          require(torch::allclose(got.params[i], want.params[i], 1e-4, 1e-5),
                  fmt::format("rank {}: parameter {} differs from one-process training", rank, i));
        const TrainRun fp16 = train(&pg, parallel::fp16_compress_hook(), 10);
        require(fp16.step_bytes.back() * 2 == got.step_bytes.back() && got.step_bytes.back() > 0,
                fmt::format("rank {}: fp16 {} bytes, allreduce {}", rank, fp16.step_bytes.back(),
                            got.step_bytes.back()));
        for (size_t i = 0; i < want.params.size(); ++i)
          require(torch::allclose(fp16.params[i], want.params[i], 0, 1e-2),
                  fmt::format("rank {}: fp16: parameter {} far from float32", rank, i));
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDPCommHook, SecondRegistrationIsAnError) {
  spawn(
      [](int) {
        auto pg = join();
        auto model = std::make_shared<Mlp>();
        DistributedDataParallel ddp(model, pg, {.comm_hook = parallel::bf16_compress_hook()});
        bool refused = false;
        try {
          ddp.register_comm_hook(parallel::powersgd_hook({.start_powerSGD_iter = 2}));
        } catch (const InvalidArgument& e) {
          refused = std::string(e.what()).find("can only be called once") != std::string::npos;
        }
        require(refused, "a second comm hook was accepted");
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDPCommHook, PowerSGDKeepsReplicasIdenticalAndConverges) {
  spawn(
      [](int rank) {
        auto pg = join();
        const int kSteps = 60;
        const TrainRun plain = train(&pg, parallel::allreduce_hook(), kSteps);
        const TrainRun power = train(
            &pg,
            parallel::powersgd_hook({.matrix_approximation_rank = 2, .start_powerSGD_iter = 2}),
            kSteps);
        // Rank 0's parameters, bit for bit, on every rank.
        for (size_t i = 0; i < power.params.size(); ++i) {
          torch::Tensor mine = power.params[i].clone(), root = power.params[i].clone();
          pg.broadcast(root, {.root = 0});
          require(torch::equal(mine, root),
                  fmt::format("rank {}: parameter {} differs from rank 0's", rank, i));
        }
        require(
            power.losses.back() < 0.3 * power.losses.front(),
            fmt::format("rank {}: loss {} -> {}", rank, power.losses.front(), power.losses.back()));
        const size_t plain_step = plain.step_bytes[kSteps - 1] - plain.step_bytes[kSteps - 2];
        const size_t power_step = power.step_bytes[kSteps - 1] - power.step_bytes[kSteps - 2];
        require(power_step * 4 < plain_step,
                fmt::format("rank {}: PowerSGD {} bytes a step, allreduce {}", rank, power_step,
                            plain_step));
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

}  // namespace
}  // namespace cohort::libtorch
