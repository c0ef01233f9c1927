// ZeRO stages 1 and 2 under a Join (uneven inputs), real processes: ranks
// with different numbers of batches of different sizes end with the same
// parameters on every rank, equal to one process applying PyTorch's gradient
// (each step the sum over the ranks still training of their mean-loss
// gradients over the initial world size), also under HSDP at 4 ranks and
// with gradient clipping (the rank out of inputs clips with the others) and
// with gradient accumulation under no_sync;
// stage 3 and a ShardedOptimizer listed first are refused, naming why.
#include <gtest/gtest.h>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/join.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<distributed::ProcessGroup> join_group() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

nn::ModulePtr make_model() {
  Generator gen(41);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 8, gen), std::make_shared<nn::BatchNorm1d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 2, gen)});
}

std::pair<Tensor, Tensor> batch(int r, int s) {
  Generator g(3000 + 100 * static_cast<uint64_t>(r) + static_cast<uint64_t>(s));
  return {randn({3 + r, 6}, g), randn({3 + r, 2}, g)};
}

// accumulate: each step is two micro-batches, the first under no_sync.
void run(int rank, int stage, const std::vector<int>& batches, int shard_size = 0, double clip = 0,
         bool accumulate = false) {
  auto pg = join_group();
  const int world = pg->size();
  auto model = make_model();
  auto ref = model->clone();
  ShardedDataParallel zero(model, pg, {.stage = stage, .hybrid_shard_size = shard_size});
  ShardedOptimizer opt(
      zero, std::make_unique<optim::SGD>(zero.shard_parameters(),
                                         optim::SGDOptions{.lr = 0.05, .momentum = 0.9}));
  run_joined({&zero, &opt}, {}, [&] {
    for (int s = 0; s < batches[static_cast<size_t>(rank)]; ++s) {
      opt.zero_grad();
      if (accumulate) {
        auto guard = zero.no_sync();
        auto [x, y] = batch(rank, 100 + s);
        mse_loss(zero.forward(x), y).backward();
      }
      auto [x, y] = batch(rank, s);
      mse_loss(zero.forward(x), y).backward();
      if (clip > 0) opt.clip_grad_norm(clip);
      opt.step();
    }
  });
  // One process: BatchNorm's statistics are each rank's own (not compared);
  // its training-mode output uses the batch's, so the gradients are exact.
  optim::SGD opt_ref(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  const int steps = *std::max_element(batches.begin(), batches.end());
  for (int s = 0; s < steps; ++s) {
    opt_ref.zero_grad();
    Tensor total;
    for (int r = 0; r < world; ++r) {
      if (s >= batches[static_cast<size_t>(r)]) continue;
      auto [x, y] = batch(r, s);
      Tensor l = mse_loss(ref->forward(x), y);
      total = total.defined() ? add(total, l) : l;
      if (accumulate) {
        auto [xa, ya] = batch(r, 100 + s);
        total = add(total, mse_loss(ref->forward(xa), ya));
      }
    }
    mul(total, 1.0 / world).backward();
    if (clip > 0) optim::clip_grad_norm(ref->parameters(), clip);
    opt_ref.step();
  }
  auto got = model->named_parameters(), want = ref->named_parameters();
  for (size_t i = 0; i < got.size(); ++i)
    if (!allclose(got[i].second, want[i].second, 1e-5, 1e-6))
      throw Error(fmt::format("rank {}: stage {}: parameter {} differs from one process's", rank,
                              stage, got[i].first));
  distributed::destroy_process_group(pg);
}

TEST(ZeroJoin, StageOneWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, 1, {4, 2}); }, 2);
}

TEST(ZeroJoin, StageTwoWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, 2, {2, 4, 3}); }, 3);
}

TEST(ZeroJoin, HybridShardingWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, 2, {3, 1, 2, 4}, 2); }, 4);
}

TEST(ZeroJoin, ClippingWithUnevenInputsMatchesOneProcess) {
  // A small max_norm, so that every step clips.
  spawn([](int rank) { run(rank, 1, {2, 4}, 0, 0.05); }, 2);
}

TEST(ZeroJoin, GradientAccumulationWithUnevenInputsMatchesOneProcess) {
  // The rank out of inputs shadows the no_sync forward without a step.
  spawn([](int rank) { run(rank, 2, {3, 1}, 0, 0, /*accumulate=*/true); }, 2);
}

TEST(ZeroJoin, RefusesStageThreeAndAnOptimizerListedFirst) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto expect_refused = [&](const std::function<void()>& f, const std::string& want) {
          try {
            f();
          } catch (const Error& e) {
            if (std::string(e.what()).find(want) != std::string::npos) return;
            throw Error(fmt::format("rank {}: wrong message: {}", rank, e.what()));
          }
          throw Error(fmt::format("rank {}: accepted, expected '{}'", rank, want));
        };
        ShardedDataParallel z3(make_model(), pg, {.stage = 3});
        expect_refused([&] { Join join({&z3}); }, "under ZeRO stage 3 is not supported");
        ShardedDataParallel z1(make_model(), pg, {.stage = 1});
        ShardedOptimizer opt(
            z1, std::make_unique<optim::SGD>(z1.shard_parameters(), optim::SGDOptions{.lr = 0.1}));
        expect_refused([&] { Join join({&opt, &z1}); }, "list it after its ShardedDataParallel");
        distributed::destroy_process_group(pg);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel
