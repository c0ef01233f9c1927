// ZeRO stages 1, 2 and 3 under a Join (uneven inputs), real processes: ranks
// with different numbers of batches of different sizes end with the same
// parameters on every rank, equal to one process applying PyTorch's gradient
// (each step the sum over the ranks still training of their mean-loss
// gradients over the initial world size, or over the ranks still training
// with divide_by_initial_world_size = false), also under HSDP at 4 ranks,
// with gradient clipping (the rank out of inputs clips with the others), with
// gradient accumulation under no_sync, and with evaluation forwards between
// steps (stage 3 shadows their gathers) or summon_full_params() before the
// Join; a ShardedOptimizer listed first is refused, and under stage 3 a rank with no batch at all
// throws naming why.
#include <gtest/gtest.h>

#include "cohort/autograd/grad_mode.h"
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

struct Case {
  int stage = 1;
  std::vector<int> batches;
  int shard_size = 0;
  double clip = 0;
  bool accumulate = false;  // each step is two micro-batches, the first under no_sync
  bool divide_by_initial_world_size = true;
  bool evaluate = false;  // a no-grad forward before each step
  bool reshard_after_forward = true;
  bool summon = false;  // summon_full_params() before the Join (a checkpoint's)
  ShardedCommHookPtr hook = nullptr;
};

void run(int rank, const Case& c) {
  auto pg = join_group();
  const int world = pg->size();
  auto model = make_model();
  auto ref = model->clone();
  ShardedDataParallel zero(model, pg,
                           {.stage = c.stage,
                            .reshard_after_forward = c.reshard_after_forward,
                            .hybrid_shard_size = c.shard_size});
  if (c.hook) zero.register_comm_hook(c.hook);
  ShardedOptimizer opt(
      zero, std::make_unique<optim::SGD>(zero.shard_parameters(),
                                         optim::SGDOptions{.lr = 0.05, .momentum = 0.9}));
  JoinOptions jo{.divide_by_initial_world_size = c.divide_by_initial_world_size};
  if (c.summon) zero.summon_full_params();
  run_joined({&zero, &opt}, jo, [&] {
    for (int s = 0; s < c.batches[static_cast<size_t>(rank)]; ++s) {
      if (c.evaluate) {
        NoGradGuard no_grad;
        zero.forward(batch(rank, 200 + s).first);
      }
      opt.zero_grad();
      if (c.accumulate) {
        auto guard = zero.no_sync();
        auto [x, y] = batch(rank, 100 + s);
        mse_loss(zero.forward(x), y).backward();
      }
      auto [x, y] = batch(rank, s);
      mse_loss(zero.forward(x), y).backward();
      if (c.clip > 0) opt.clip_grad_norm(c.clip);
      opt.step();
    }
  });
  zero.summon_full_params();
  // One process: BatchNorm's statistics are each rank's own (not compared);
  // its training-mode output uses the batch's, so the gradients are exact.
  optim::SGD opt_ref(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  const int steps = *std::max_element(c.batches.begin(), c.batches.end());
  for (int s = 0; s < steps; ++s) {
    opt_ref.zero_grad();
    Tensor total;
    int training = 0;
    for (int r = 0; r < world; ++r) {
      if (s >= c.batches[static_cast<size_t>(r)]) continue;
      ++training;
      auto [x, y] = batch(r, s);
      Tensor l = mse_loss(ref->forward(x), y);
      total = total.defined() ? add(total, l) : l;
      if (c.accumulate) {
        auto [xa, ya] = batch(r, 100 + s);
        total = add(total, mse_loss(ref->forward(xa), ya));
      }
    }
    mul(total, 1.0 / (c.divide_by_initial_world_size ? world : training)).backward();
    if (c.clip > 0) optim::clip_grad_norm(ref->parameters(), c.clip);
    opt_ref.step();
  }
  auto got = model->named_parameters(), want = ref->named_parameters();
  // bf16 keeps about 3 significant digits of each reduced gradient.
  const double tol = c.hook ? 1e-2 : 1e-5;
  for (size_t i = 0; i < got.size(); ++i)
    if (!allclose(got[i].second, want[i].second, tol, tol / 10))
      throw Error(fmt::format("rank {}: stage {}: parameter {} differs from one process's by {}",
                              rank, c.stage, got[i].first,
                              max(abs(sub(got[i].second, want[i].second))).item<float>()));
  distributed::destroy_process_group(pg);
}

TEST(ZeroJoin, StageOneWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, {.stage = 1, .batches = {4, 2}}); }, 2);
}

TEST(ZeroJoin, StageTwoWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, {.stage = 2, .batches = {2, 4, 3}}); }, 3);
}

TEST(ZeroJoin, StageThreeWithUnevenInputsMatchesOneProcess) {
  // Rank 0 runs out first: the lowest rank shadows the gathers too.
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {2, 4, 3}}); }, 3);
}

TEST(ZeroJoin, StageThreeKeepingParametersUntilBackwardMatchesOneProcess) {
  // No gathers in backward: the units stay from their forward.
  spawn(
      [](int rank) {
        run(rank, {.stage = 3, .batches = {4, 2}, .reshard_after_forward = false});
      },
      2);
}

TEST(ZeroJoin, HybridShardingWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, {.stage = 2, .batches = {3, 1, 2, 4}, .shard_size = 2}); }, 4);
}

TEST(ZeroJoin, StageThreeHybridShardingWithUnevenInputsMatchesOneProcess) {
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {3, 1, 2, 4}, .shard_size = 2}); }, 4);
}

TEST(ZeroJoin, ClippingWithUnevenInputsMatchesOneProcess) {
  // A small max_norm, so that every step clips.
  spawn([](int rank) { run(rank, {.stage = 1, .batches = {2, 4}, .clip = 0.05}); }, 2);
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {4, 2}, .clip = 0.05}); }, 2);
}

TEST(ZeroJoin, GradientAccumulationWithUnevenInputsMatchesOneProcess) {
  // The rank out of inputs shadows the no_sync forward without a step.
  spawn([](int rank) { run(rank, {.stage = 2, .batches = {3, 1}, .accumulate = true}); }, 2);
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {1, 3}, .accumulate = true}); }, 2);
}

TEST(ZeroJoin, EvaluationForwardsWithUnevenInputsMatchOneProcess) {
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {3, 1}, .evaluate = true}); }, 2);
}

TEST(ZeroJoin, StageThreeWithParametersSummonedBetweenStepsMatchesOneProcess) {
  // The first forward after summon_full_params starts with every unit
  // gathered (as an epoch after a checkpoint); under a Join it gathers as
  // any other, so the shadow's replay of it matches the others' later ones.
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {1, 3}, .summon = true}); }, 2);
  spawn([](int rank) { run(rank, {.stage = 3, .batches = {3, 1}, .summon = true}); }, 2);
}

TEST(ZeroJoin, DivideByRanksStillTrainingMatchesOneProcess) {
  for (int stage : {1, 2, 3}) {
    spawn(
        [stage](int rank) {
          run(rank, {.stage = stage, .batches = {2, 4, 3}, .divide_by_initial_world_size = false});
        },
        3);
  }
  spawn(
      [](int rank) {
        run(rank, {.stage = 3,
                   .batches = {3, 1, 2, 4},
                   .shard_size = 2,
                   .divide_by_initial_world_size = false});
      },
      4);
}

TEST(ZeroJoin, CommHookWithUnevenInputsMatchesOneProcess) {
  spawn(
      [](int rank) {
        run(rank, {.stage = 3, .batches = {2, 4}, .hook = zero_bf16_compress_hook()});
      },
      2);
}

TEST(ZeroJoin, RefusesAnOptimizerListedFirst) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        ShardedDataParallel z1(make_model(), pg, {.stage = 1});
        ShardedOptimizer opt(
            z1, std::make_unique<optim::SGD>(z1.shard_parameters(), optim::SGDOptions{.lr = 0.1}));
        try {
          Join join({&opt, &z1});
        } catch (const Error& e) {
          if (std::string(e.what()).find("list it after its ShardedDataParallel") !=
              std::string::npos) {
            distributed::destroy_process_group(pg);
            return;
          }
          throw Error(fmt::format("rank {}: wrong message: {}", rank, e.what()));
        }
        throw Error(fmt::format("rank {}: an optimizer listed first was accepted", rank));
      },
      2);
}

TEST(ZeroJoin, StageThreeRankWithoutBatchesThrowsNamingWhy) {
  // Rank 1 has no iteration to replay and says so; rank 0 then loses its
  // peer (PeerLost), never hangs. Each child checks its own outcome.
  spawn(
      [](int rank) {
        auto pg = join_group();
        ShardedDataParallel zero(make_model(), pg, {.stage = 3});
        ShardedOptimizer opt(zero, std::make_unique<optim::SGD>(zero.shard_parameters(),
                                                                optim::SGDOptions{.lr = 0.1}));
        try {
          run_joined({&zero, &opt}, {}, [&] {
            if (rank == 1) return;
            for (int s = 0; s < 2; ++s) {
              opt.zero_grad();
              auto [x, y] = batch(rank, s);
              mse_loss(zero.forward(x), y).backward();
              opt.step();
            }
          });
        } catch (const Error& e) {
          const bool named = std::string(e.what()).find("ran out of inputs before it ran one") !=
                             std::string::npos;
          if (rank == 1 && !named) throw Error(fmt::format("rank 1: wrong message: {}", e.what()));
          std::_Exit(0);
        }
        throw Error(fmt::format("rank {}: finished although rank 1 had no batch", rank));
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel
