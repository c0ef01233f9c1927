// ZeRO (ShardedDataParallel + ShardedOptimizer) with real processes
// (cohort::spawn). Each rank trains W ranks x batch B/W with one stage and
// checks, after 20 steps, that its full parameters equal both one process
// training on the whole batch B and DDP on the same split (float32
// tolerance): Net with SGD + momentum, the MLP with AdamW, a tiny GPT with
// AdamW in two param groups and gradient clipping, and a small model whose
// tensors are smaller than the world size (empty chunks, a rank whose whole
// segment of a unit is empty) with frozen parameters and Adam. Then the
// byte accounting against the ZeRO formulas, and a rank that issues a
// collective out of order (a named mismatch, not a hang).
#include <gtest/gtest.h>

#include <cmath>

#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/zero/sharded_optimizer.h"
#include "tests/zero/zero_test_models.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

using namespace zero_testing;

nn::NamedTensors train_ddp(Model m, int steps,
                           const std::shared_ptr<distributed::ProcessGroup>& pg) {
  auto model = make_model(m, pg->rank());
  DistributedDataParallel ddp(model, pg);
  auto opt = make_opt(m, *model, [](const Tensor& t) { return t; });
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    Batch b = slice(batch_of(m, s), pg->rank(), pg->size());
    ddp.forward_with([&](nn::Module& mod) { return loss_of(m, mod, b); }).backward();
    if (m == Model::kGpt) optim::clip_grad_norm(model->parameters(), kClip);
    opt->step();
  }
  return snapshot(*model);
}

nn::NamedTensors train_zero(Model m, int stage, int steps,
                            const std::shared_ptr<distributed::ProcessGroup>& pg,
                            bool reshard_after_forward = true) {
  auto model = make_model(m, pg->rank());
  ShardedDataParallel zero(model, pg,
                           {.stage = stage,
                            .reshard_after_forward = reshard_after_forward,
                            .unit_policy = policy_of(m)});
  // Net's layers are units of their own (conv's fused forward_relu runs the hooks).
  if (m == Model::kNet && zero.num_units() < 4)
    throw Error(fmt::format("Net is {} unit(s), not one per layer", zero.num_units()));
  ShardedOptimizer opt(zero,
                       make_opt(m, *model, [&](const Tensor& t) { return zero.shard_of(t); }));
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Batch b = slice(batch_of(m, s), pg->rank(), pg->size());
    zero.forward_with([&](nn::Module& mod) { return loss_of(m, mod, b); }).backward();
    if (m == Model::kGpt) opt.clip_grad_norm(kClip);
    opt.step();
  }
  if (zero.num_reductions() != steps)
    throw Error(fmt::format("{} reductions for {} steps", zero.num_reductions(), steps));
  zero.summon_full_params();
  return snapshot(*model);
}

void run_equivalence(Model m, int stage, int steps = 20, bool reshard = true) {
  // (Every rank checks against DDP; rank 0 also against one process.)
  KernelPathGuard exact_kernels(KernelPath::kBaseline);
  auto pg = join();
  auto zero = train_zero(m, stage, steps, pg, reshard);
  auto ddp = train_ddp(m, steps, pg);
  std::string what = fmt::format("rank {} of {}, stage {}", pg->rank(), pg->size(), stage);
  check_params(zero, ddp, what + " vs DDP");
  if (pg->rank() == 0) check_params(zero, train_reference(m, steps), what + " vs one process");
  distributed::destroy_process_group(pg);
}

#define ZERO_EQ_TEST(Name, model, world, steps)                                                   \
  TEST(Zero, Name) {                                                                              \
    for (int stage : {1, 2, 3}) spawn([&](int) { run_equivalence(model, stage, steps); }, world); \
  }

ZERO_EQ_TEST(NetMatchesDdpAndOneProcessTwoRanks, Model::kNet, 2, 20)
ZERO_EQ_TEST(NetMatchesDdpAndOneProcessFourRanks, Model::kNet, 4, 10)
ZERO_EQ_TEST(MlpMatchesDdpAndOneProcessTwoRanks, Model::kMlp, 2, 20)
ZERO_EQ_TEST(MlpMatchesDdpAndOneProcessFourRanks, Model::kMlp, 4, 20)
ZERO_EQ_TEST(GptWithGroupsAndClippingMatchesTwoRanks, Model::kGpt, 2, 20)
ZERO_EQ_TEST(GptWithGroupsAndClippingMatchesFourRanks, Model::kGpt, 4, 20)
ZERO_EQ_TEST(EmptyChunksAndFrozenParametersMatchFourRanks, Model::kOdd, 4, 20)

TEST(Zero, Stage3KeepingParametersAfterForwardMatches) {
  spawn([](int) { run_equivalence(Model::kGpt, 3, 10, /*reshard=*/false); }, 2);
}

// Stage 3's resident gather buffers (ZeroOptions::resident_gather_buffers):
// training with them gives the same bits as gathering into each unit's own
// block (the parameters' storage, and so the views autograd saved in forward,
// follows the unit between buffers); they hold at most the root unit and two
// of the largest units; and the module keeps summon_full_params()'s values
// after the wrapper is gone.
TEST(Zero, Stage3GatherBuffersAreReusedAndChangeNoBits) {
  spawn(
      [](int) {
        KernelPathGuard exact_kernels(KernelPath::kBaseline);
        auto pg = join();
        const Model m = Model::kGpt;
        std::vector<nn::NamedTensors> trained;
        for (bool resident : {false, true}) {
          auto model = make_model(m, pg->rank());
          nn::NamedTensors summoned;
          {
            ShardedDataParallel zero(
                model, pg,
                {.stage = 3, .unit_policy = policy_of(m), .resident_gather_buffers = resident});
            ShardedOptimizer opt(
                zero, make_opt(m, *model, [&](const Tensor& t) { return zero.shard_of(t); }));
            for (int s = 0; s < 5; ++s) {
              opt.zero_grad();
              Batch b = slice(batch_of(m, s), pg->rank(), pg->size());
              zero.forward_with([&](nn::Module& mod) { return loss_of(m, mod, b); }).backward();
              opt.clip_grad_norm(kClip);
              opt.step();
            }
            size_t largest = 0, root = 0;
            for (size_t u = 0; u < zero.num_units(); ++u) {
              const size_t bytes = static_cast<size_t>(zero.unit_layout(u).total_numel()) * 4;
              if (zero.unit_parameter_names()[u].first.empty()) {
                root = bytes;
              } else {
                largest = std::max(largest, bytes);
              }
            }
            const size_t buffers = zero.memory_stats().gather_buffer_bytes;
            if (resident ? (buffers == 0 || buffers > root + 2 * largest) : buffers != 0)
              throw Error(
                  fmt::format("resident={}: {} B of gather buffers (root {} B, largest "
                              "unit {} B)",
                              resident, buffers, root, largest));
            zero.summon_full_params();
            summoned = snapshot(*model);
          }
          // The wrapper is gone; the module keeps the gathered values.
          nn::NamedTensors after = snapshot(*model);
          for (size_t i = 0; i < after.size(); ++i)
            if (!equal(after[i].second, summoned[i].second))
              throw Error(fmt::format("resident={}: '{}' changed when the wrapper went", resident,
                                      after[i].first));
          trained.push_back(summoned);
        }
        for (size_t i = 0; i < trained[0].size(); ++i)
          if (!equal(trained[0][i].second, trained[1][i].second))
            throw Error(fmt::format("parameter '{}' differs with resident gather buffers",
                                    trained[0][i].first));
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(Zero, ShardsAreRankMajorChunksWithEmptyOnes) {
  spawn(
      [](int rank) {
        auto pg = join();
        auto model = make_model(Model::kOdd, rank);
        ShardedDataParallel zero(model, pg, {.stage = 2});
        // Units a, b, then the root (frozen, scale).
        auto units = zero.unit_parameter_names();
        if (units.size() != 3 || units[1].first != "b" || units[2].first != "")
          throw Error("unexpected units");
        const FlatLayout& b = zero.unit_layout(1);  // b.weight 5, b.bias 1 over 4 ranks
        if (b.chunk(0) != 2 || b.chunk(1) != 1 || b.shard_numel() != 3)
          throw Error("unexpected layout of unit b");
        const int64_t want_local[4] = {3, 2, 1, 0};  // rank 3's segment is all padding
        if (b.local_numel(0, rank) + b.local_numel(1, rank) != want_local[rank])
          throw Error("unexpected chunk sizes");
        auto named = [&](const std::string& n) {
          for (const auto& [name, t] : model->named_parameters())
            if (name == n) return t;
          throw Error("no parameter " + n);
        };
        if (zero.shard_of(named("b.weight")).numel() != b.local_numel(0, rank))
          throw Error("shard_of(b.weight) has the wrong size");
        bool threw = false;
        try {
          zero.shard_of(named("a.bias"));  // frozen
        } catch (const InvalidArgument& e) {
          threw = std::string(e.what()).find("frozen") != std::string::npos;
        }
        if (!threw) throw Error("shard_of a frozen parameter did not say so");
        distributed::destroy_process_group(pg);
      },
      4);
}

TEST(Zero, OptimizerOverFullParametersIsRefused) {
  spawn(
      [](int rank) {
        auto pg = join();
        auto model = make_model(Model::kMlp, rank);
        ShardedDataParallel zero(model, pg, {.stage = 1});
        try {
          ShardedOptimizer opt(
              zero, std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{}));
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("shard_parameters") != std::string::npos) return;
        }
        throw Error("an optimizer over the full parameters was accepted");
      },
      2);
}

// Calls its child's forward() directly, past the hooks stage 3 gathers on.
class Bypass : public nn::Cloneable<Bypass> {
 public:
  explicit Bypass(Generator& gen) : Cloneable("Bypass") {
    a_ = register_module("a", std::make_shared<nn::Linear>(6, 5, gen));
  }
  Tensor forward(const Tensor& x) override { return a_->forward(x); }

 private:
  nn::Child<nn::Linear> a_;
};

TEST(Zero, UnitEnteredWithoutHooksIsNamed) {
  spawn(
      [](int rank) {
        auto pg = join();
        Generator gen(1);
        auto model = std::make_shared<Bypass>(gen);
        ShardedDataParallel zero(model, pg, {.stage = 3});
        try {
          zero.forward(Tensor::ones({2, 6}));
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("'a'") != std::string::npos) return;
          throw;
        }
        throw Error("a unit run without its hooks went unnoticed");
      },
      2);
}

TEST(Zero, CollectiveOutOfOrderOnOneRankIsAMismatchNotAHang) {
  try {
    spawn(
        [](int rank) {
          auto pg = join();
          auto model = make_model(Model::kMlp, rank);
          ShardedDataParallel zero(model, pg, {.stage = 2});
          Batch b = slice(batch_of(Model::kMlp, 0), rank, 2);
          Tensor loss = loss_of(Model::kMlp, zero, b);
          // Rank 1 issues an all_reduce where rank 0 reduce-scatters gradients.
          if (rank == 1) pg->all_reduce(Tensor::ones({3}));
          loss.backward();
          distributed::destroy_process_group(pg);
        },
        2);
  } catch (const SpawnError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("mismatch"), std::string::npos) << what;
    EXPECT_NE(what.find("reduce_scatter"), std::string::npos) << what;
    return;
  }
  FAIL() << "the out-of-order collective was not reported";
}

// Per-rank model-state bytes and bytes passed to the group per step, measured
// from the buffers and the calls, against the ZeRO formulas for fp32 AdamW
// (within 10 %), on an MLP whose tensors all divide by 2 and 4.
void run_accounting(int rank) {
  auto pg = join();
  const int world = pg->size();
  const nn::MlpOptions mlp{.in_features = 64, .width = 64, .hidden_layers = 2, .classes = 8};
  Generator data(7);
  Tensor x = rand({8, 64}, data), y = randint(0, 8, {8}, data);
  for (int stage = 0; stage <= 3; ++stage) {
    Generator gen(42);
    auto model = nn::make_mlp(gen, mlp);
    const int64_t psi = model->num_parameters();
    double state = 0, traffic = 0, gather = 0;
    if (stage == 0) {
      DistributedDataParallel ddp(model, pg);
      optim::AdamW opt(model->parameters(), {});
      for (int s = 0; s < 2; ++s) {
        opt.zero_grad();
        nll_loss(ddp(x), y).backward();
        opt.step();
      }
      size_t buckets = 0;
      for (size_t b = 0; b < ddp.reducer().num_buckets(); ++b)
        buckets += ddp.reducer().bucket_buffer(b).nbytes();
      size_t params = 0;
      for (const Tensor& p : model->parameters()) params += p.nbytes();
      state = static_cast<double>(params + buckets + optimizer_state_bytes(opt));
      traffic = 2.0 * static_cast<double>(buckets);  // one all_reduce of every bucket
    } else {
      ShardedDataParallel zero(model, pg, {.stage = stage});
      ShardedOptimizer opt(
          zero, std::make_unique<optim::AdamW>(zero.shard_parameters(), optim::AdamWOptions{}));
      uint64_t before = 0;
      for (int s = 0; s < 2; ++s) {
        before = zero.traffic().total();
        opt.zero_grad();
        nll_loss(zero(x), y).backward();
        opt.step();
      }
      ZeroMemoryStats m = zero.memory_stats();
      state = static_cast<double>(m.parameter_bytes + m.gradient_bytes + opt.state_bytes());
      traffic = static_cast<double>(zero.traffic().total() - before);
      gather = static_cast<double>(m.gather_bytes_peak);
      if (stage == 3 && m.gathered_units_peak != 2)
        throw Error(
            fmt::format("stage 3 had {} units gathered at once, want 2 (one computing, "
                        "the next prefetched)",
                        m.gathered_units_peak));
    }
    const double want_state = zero_model_state_bytes(stage, psi, world);
    const double want_traffic = zero_traffic_bytes(stage, psi);
    if (rank == 0) {
      std::printf(
          "N=%d stage %d: model state %.0f B (formula %.0f, %.3fx), gather peak %.0f B, "
          "traffic %.0f B/step (formula %.0f, %.3fx)\n",
          world, stage, state, want_state, state / want_state, gather, traffic, want_traffic,
          traffic / want_traffic);
    }
    if (std::fabs(state / want_state - 1) > 0.1 || std::fabs(traffic / want_traffic - 1) > 0.1)
      throw Error(fmt::format("rank {}, N={}, stage {}: state {} B vs {} B, traffic {} B vs {} B",
                              rank, world, stage, state, want_state, traffic, want_traffic));
  }
  distributed::destroy_process_group(pg);
}

TEST(Zero, ModelStateAndTrafficBytesMatchTheFormulas) {
  spawn(run_accounting, 2);
  spawn(run_accounting, 4);
}

TEST(Zero, GradientsAreReduceScatteredWhileBackwardRuns) {
  spawn(
      [](int rank) {
        auto pg = join();
        auto model = make_model(Model::kMlp, rank);
        ShardedDataParallel zero(model, pg, {.stage = 2});
        // When the first layer's weight -- the last gradient backward
        // computes -- is ready, the later layers' units were already launched.
        uint64_t at_first_layer = 0;
        Tensor w0 = model->named_parameters().front().second;
        GradHookHandle h = w0.register_grad_ready_hook(
            [&](Tensor&) { at_first_layer = zero.traffic().reduce_scatter_bytes; });
        Batch b = slice(batch_of(Model::kMlp, 0), rank, 2);
        nll_loss(zero(b.x), b.y).backward();
        const uint64_t total = zero.traffic().reduce_scatter_bytes;
        if (!(at_first_layer > 0 && at_first_layer < total))
          throw Error(fmt::format("{} of {} reduce_scatter bytes issued before the last gradient",
                                  at_first_layer, total));
        h.remove();
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(FlatLayout, PacksRankMajorPaddedChunksAndBack) {
  // {5, 2} over 2 ranks: c = {3, 1}, S = 4;
  // buffer [t0[0..3) t1[0] | t0[3..5) pad t1[1]].
  FlatLayout l({5, 2}, 2);
  EXPECT_EQ(l.shard_numel(), 4);
  EXPECT_EQ(l.total_numel(), 8);
  EXPECT_EQ(l.local_numel(0, 1), 2);
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5}), b = Tensor::from_vector<float>({6, 7});
  std::vector<float> flat(8, -1);
  l.pack({a, b}, flat.data(), sizeof(float));
  EXPECT_EQ(flat, (std::vector<float>{1, 2, 3, 6, 4, 5, 0, 7}));
  Tensor a2 = Tensor::zeros({5}), b2 = Tensor::zeros({2});
  l.unpack(flat.data(), {a2, b2}, sizeof(float));
  EXPECT_TRUE(equal(a, a2));
  EXPECT_TRUE(equal(b, b2));
  EXPECT_EQ(l.piece_of_tensor(a, 0, 1).to_vector<float>(), (std::vector<float>{4, 5}));
  // One shard: plain concatenation, views into the buffer (DDP's buckets).
  FlatLayout one({5, 2}, 1);
  Tensor buf = Tensor::arange(0.0, 7.0, 1.0);
  EXPECT_EQ(one.view(buf, 1, {2, 1}).to_vector<float>(), (std::vector<float>{5, 6}));
  // A tensor smaller than the world: ranks past its elements hold nothing.
  FlatLayout tiny({1}, 4);
  EXPECT_EQ(tiny.local_numel(0, 0), 1);
  EXPECT_EQ(tiny.local_numel(0, 3), 0);
}

TEST(ZeroAuto, PicksTheLowestTrafficStageThatFitsOrNamesTheWorldSize) {
  const int64_t psi = 1000000;  // 16 MB of model state under DDP
  std::string why;
  EXPECT_EQ(choose_zero_stage(psi, 4, 11e6, &why), 1);  // stage 1: 8 + 2 = 10 MB
  EXPECT_NE(why.find("stage 1"), std::string::npos) << why;
  EXPECT_EQ(choose_zero_stage(psi, 4, 8e6, &why), 2);  // stage 2: 4 + 3 = 7 MB
  EXPECT_EQ(choose_zero_stage(psi, 4, 5e6, &why), 3);  // stage 3: 4 MB
  EXPECT_NE(why.find("stage 2 would need 7.0 MB"), std::string::npos) << why;
  try {
    choose_zero_stage(psi, 4, 3e6);
    FAIL() << "3 MB per rank cannot hold 16 MB over 4 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("from 6 ranks on"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort::parallel
