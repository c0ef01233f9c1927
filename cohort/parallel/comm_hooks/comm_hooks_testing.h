// Test helper (not installed): a small model trained by DDP over thread
// ranks with a given comm hook, for the hooks' tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cohort/autograd/ops.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/sequential.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel::testing {

// in -> hidden -> out, the same weights on every rank (seed 7).
inline std::shared_ptr<nn::Sequential> mlp(int64_t in, int64_t hidden, int64_t out) {
  Generator gen(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(in, hidden, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(hidden, out, gen)});
}

// A teacher: y = x A for a fixed random A (seed 99), x of step `step` and
// `rank` (each rank its own data).
inline std::pair<Tensor, Tensor> regression_batch(int64_t in, int64_t out, int step, int rank) {
  Generator teacher(99);
  Tensor a = randn({in, out}, teacher);
  Generator g(1000 + static_cast<uint64_t>(step) * 16 + static_cast<uint64_t>(rank));
  Tensor x = randn({16, in}, g);
  return {x, matmul(x, a)};
}

struct TrainResult {
  std::vector<double> losses;      // per step, this rank's
  nn::NamedTensors parameters;     // after the last step
  std::vector<size_t> step_bytes;  // Reducer::reduced_bytes per step
};

// `steps` steps of SGD on rank `rank`'s batches through DDP with `hook`.
inline TrainResult train(std::shared_ptr<distributed::ProcessGroup> pg, CommHookPtr hook, int steps,
                         int64_t in = 8, int64_t hidden = 32, int64_t out = 8, double lr = 0.05) {
  auto model = mlp(in, hidden, out);
  DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.001, .comm_hook = std::move(hook)});
  optim::SGD opt(ddp.parameters(), {.lr = lr});
  TrainResult r;
  size_t bytes = 0;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = regression_batch(in, out, s, pg->rank());
    opt.zero_grad();
    Tensor loss = mse_loss(ddp.forward(x), y);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
    r.step_bytes.push_back(ddp.reducer().reduced_bytes() - bytes);
    bytes = ddp.reducer().reduced_bytes();
  }
  for (auto& [name, t] : model->named_parameters()) r.parameters.emplace_back(name, t.clone());
  return r;
}

// fn(rank's group) on `n` thread ranks; results[rank].
inline std::vector<TrainResult> on_ranks(
    int n, const std::function<TrainResult(std::shared_ptr<distributed::ProcessGroup>)>& fn) {
  std::vector<TrainResult> results(static_cast<size_t>(n));
  distributed::testing::run_ranks_named("hooks", n,
                                        [&](std::shared_ptr<distributed::ProcessGroup> pg) {
                                          results[static_cast<size_t>(pg->rank())] = fn(pg);
                                        });
  return results;
}

}  // namespace cohort::parallel::testing
