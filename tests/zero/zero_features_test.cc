// ZeRO (ShardedDataParallel) beyond the stages themselves, with real
// processes (cohort::spawn): gradients reduce-scattered in bf16
// (ZeroOptions::reduce_dtype) -- half the reduce_scatter bytes, measured by
// the wrapper's traffic accounting, and a loss that stays within bf16
// rounding of the float32 run over 20 steps on the MLP and a tiny GPT; and
// gradient accumulation under no_sync(), equal to one process on the whole
// batch and to DDP's no_sync at every stage.
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
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/zero/sharded_optimizer.h"
#include "tests/zero/zero_test_models.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

using namespace zero_testing;

struct Run {
  std::vector<double> losses;  // this rank's loss at each step
  nn::NamedTensors params;     // the full parameters at the end
  ZeroTrafficStats traffic;
};

// `steps` steps of W ranks x batch kBatch / W under `o`.
Run train_zero(Model m, ZeroOptions o, int steps,
               const std::shared_ptr<distributed::ProcessGroup>& pg) {
  auto model = make_model(m, pg->rank());
  o.unit_policy = policy_of(m);
  ShardedDataParallel zero(model, pg, o);
  ShardedOptimizer opt(zero,
                       make_opt(m, *model, [&](const Tensor& t) { return zero.shard_of(t); }));
  Run run;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Batch b = slice(batch_of(m, s), pg->rank(), pg->size());
    Tensor loss = zero.forward_with([&](nn::Module& mod) { return loss_of(m, mod, b); });
    run.losses.push_back(loss.item<double>());
    loss.backward();
    if (m == Model::kGpt) opt.clip_grad_norm(kClip);
    opt.step();
  }
  zero.summon_full_params();
  run.params = snapshot(*model);
  run.traffic = zero.traffic();
  return run;
}

// ---- bf16 gradient reduction ----

void run_bf16(Model m) {
  auto pg = join();
  constexpr int kSteps = 20;
  for (int stage : {1, 2, 3}) {
    const std::string what =
        fmt::format("{}, stage {}, rank {}", m == Model::kMlp ? "MLP" : "GPT", stage, pg->rank());
    Run f = train_zero(m, {.stage = stage}, kSteps, pg);
    Run h = train_zero(m, {.stage = stage, .reduce_dtype = DType::kBFloat16}, kSteps, pg);
    // The gradients' reduce_scatter moves half the bytes; the parameters'
    // all_gathers stay float32.
    if (h.traffic.reduce_scatter_bytes * 2 != f.traffic.reduce_scatter_bytes ||
        h.traffic.all_gather_bytes != f.traffic.all_gather_bytes)
      throw Error(
          fmt::format("{}: reduce_scatter {} B (bf16) vs {} B (float32), all_gather {} B vs {} B",
                      what, h.traffic.reduce_scatter_bytes, f.traffic.reduce_scatter_bytes,
                      h.traffic.all_gather_bytes, f.traffic.all_gather_bytes));
    if (pg->rank() == 0)
      std::printf(
          "%s: bytes per step float32 %.0f (reduce_scatter %.0f), bf16 %.0f (%.0f)\n", what.c_str(),
          double(f.traffic.total()) / kSteps, double(f.traffic.reduce_scatter_bytes) / kSteps,
          double(h.traffic.total()) / kSteps, double(h.traffic.reduce_scatter_bytes) / kSteps);
    // bf16 keeps about 3 significant digits of each averaged gradient;
    // AdamW normalises the update, so the loss follows float32's closely.
    double worst = 0;
    for (int s = 0; s < kSteps; ++s) {
      const double d = std::fabs(h.losses[s] - f.losses[s]) / std::max(1.0, std::fabs(f.losses[s]));
      worst = std::max(worst, d);
    }
    if (worst > 1e-2)
      throw Error(fmt::format("{}: the bf16 run's loss strays {:.3g} (relative) from float32's",
                              what, worst));
    bool identical = true;
    for (size_t i = 0; i < f.params.size(); ++i)
      identical = identical && equal(f.params[i].second, h.params[i].second);
    if (identical) throw Error(what + ": bf16 reduction gave float32's bits: not applied?");
    if (pg->rank() == 0)
      std::printf("%s: final loss float32 %.6f, bf16 %.6f, worst step %.2e\n", what.c_str(),
                  f.losses.back(), h.losses.back(), worst);
  }
  distributed::destroy_process_group(pg);
}

TEST(ZeroBf16, MlpGradReduceHalvesTheReduceScatterBytesAndFollowsFloat32) {
  spawn([](int) { run_bf16(Model::kMlp); }, 2);
}

TEST(ZeroBf16, GptGradReduceHalvesTheReduceScatterBytesAndFollowsFloat32) {
  spawn([](int) { run_bf16(Model::kGpt); }, 2);
}

TEST(ZeroBf16, OnlyFloat32AndBf16AreReduceDtypes) {
  spawn(
      [](int rank) {
        auto pg = join();
        try {
          ShardedDataParallel zero(make_model(Model::kMlp, rank), pg,
                                   {.stage = 2, .reduce_dtype = DType::kFloat64});
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("reduce_dtype") != std::string::npos) return;
          throw;
        }
        throw Error("reduce_dtype float64 was accepted");
      },
      2);
}

// ---- no_sync: gradient accumulation ----

// Each step: kMicro micro-batches of this rank's share, the first kMicro - 1
// under no_sync, each loss scaled by 1 / kMicro, so that the accumulated sum
// is the gradient of the whole share's mean loss.
constexpr int kMicro = 4;

// `check` runs after each no_sync backward. (ZeRO and DDP alike.)
template <typename Wrapper>
void accumulate_step(Model m, Wrapper& w, const Batch& share,
                     const std::function<void()>& check = {}) {
  for (int k = 0; k < kMicro; ++k) {
    Batch mb = slice(share, k, kMicro);
    auto run = [&] {
      Tensor loss = w.forward_with([&](nn::Module& mod) { return loss_of(m, mod, mb); });
      mul(loss, Tensor::scalar(1.0f / kMicro)).backward();
    };
    if (k + 1 < kMicro) {
      auto guard = w.no_sync();
      run();
      if (check) check();
    } else {
      run();
    }
  }
}

nn::NamedTensors train_ddp_no_sync(Model m, int steps,
                                   const std::shared_ptr<distributed::ProcessGroup>& pg) {
  auto model = make_model(m, pg->rank());
  DistributedDataParallel ddp(model, pg);
  auto opt = make_opt(m, *model, [](const Tensor& t) { return t; });
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    accumulate_step(m, ddp, slice(batch_of(m, s), pg->rank(), pg->size()));
    if (m == Model::kGpt) optim::clip_grad_norm(model->parameters(), kClip);
    opt->step();
  }
  return snapshot(*model);
}

void run_no_sync(Model m) {
  KernelPathGuard exact_kernels(KernelPath::kBaseline);
  auto pg = join();
  constexpr int kSteps = 10;
  const nn::NamedTensors ddp = train_ddp_no_sync(m, kSteps, pg);
  const nn::NamedTensors one = pg->rank() == 0 ? train_reference(m, kSteps) : nn::NamedTensors{};
  for (int stage : {1, 2, 3}) {
    const std::string what =
        fmt::format("{}, stage {}, rank {}", m == Model::kMlp ? "MLP" : "GPT", stage, pg->rank());
    auto model = make_model(m, pg->rank());
    ShardedDataParallel zero(model, pg, {.stage = stage, .unit_policy = policy_of(m)});
    ShardedOptimizer opt(zero,
                         make_opt(m, *model, [&](const Tensor& t) { return zero.shard_of(t); }));
    int64_t trainable_bytes = 0;
    for (const Tensor& p : model->parameters()) trainable_bytes += p.nbytes();
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      const uint64_t rs_before = zero.traffic().reduce_scatter_bytes;
      accumulate_step(m, zero, slice(batch_of(m, s), pg->rank(), pg->size()), [&] {
        // Nothing reduced yet; stages 2 and 3 hold the full gradients.
        ZeroMemoryStats ms = zero.memory_stats();
        const int64_t want = stage == 1 ? 0 : trainable_bytes;
        if (zero.traffic().reduce_scatter_bytes != rs_before ||
            static_cast<int64_t>(ms.no_sync_gradient_bytes) != want)
          throw Error(
              fmt::format("{}: after a no_sync backward {} reduce_scatter bytes, {} B "
                          "of full gradients (want 0 and {})",
                          what, zero.traffic().reduce_scatter_bytes - rs_before,
                          ms.no_sync_gradient_bytes, want));
      });
      if (zero.memory_stats().no_sync_gradient_bytes != 0)
        throw Error(what + ": the full gradients outlived the synchronised backward");
      if (m == Model::kGpt) opt.clip_grad_norm(kClip);
      opt.step();
    }
    if (zero.num_reductions() != kSteps)
      throw Error(
          fmt::format("{}: {} reductions for {} steps", what, zero.num_reductions(), kSteps));
    if (stage == 3 && zero.memory_stats().gathered_units_peak > 2)
      throw Error(fmt::format("{}: {} units gathered at once under no_sync", what,
                              zero.memory_stats().gathered_units_peak));
    zero.summon_full_params();
    const nn::NamedTensors got = snapshot(*model);
    check_params(got, ddp, what + " vs DDP's no_sync");
    if (pg->rank() == 0) check_params(got, one, what + " vs one process on the whole batch");
  }
  distributed::destroy_process_group(pg);
}

TEST(ZeroNoSync, MlpAccumulatedMicroBatchesEqualOneBatchAndDdp) {
  spawn([](int) { run_no_sync(Model::kMlp); }, 2);
}

TEST(ZeroNoSync, GptAccumulatedMicroBatchesEqualOneBatchAndDdp) {
  spawn([](int) { run_no_sync(Model::kGpt); }, 2);
}

// ---- HSDP: shard within groups of S ranks, replicate across them ----

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

void run_hybrid(Model m) {
  KernelPathGuard exact_kernels(KernelPath::kBaseline);
  auto pg = join();
  constexpr int kSteps = 20, kShard = 2;
  const nn::NamedTensors ddp = train_ddp(m, kSteps, pg);
  const nn::NamedTensors one = pg->rank() == 0 ? train_reference(m, kSteps) : nn::NamedTensors{};
  for (int stage : {1, 2, 3}) {
    const std::string what =
        fmt::format("{}, HSDP {} x {}, stage {}, rank {}", m == Model::kMlp ? "MLP" : "GPT",
                    pg->size() / kShard, kShard, stage, pg->rank());
    Run run = train_zero(m, {.stage = stage, .hybrid_shard_size = kShard}, kSteps, pg);
    check_params(run.params, ddp, what + " vs DDP");
    if (pg->rank() == 0) check_params(run.params, one, what + " vs one process");
  }
  distributed::destroy_process_group(pg);
}

TEST(ZeroHybrid, MlpShardedInPairsOfFourRanksMatchesDdpAndOneProcess) {
  spawn([](int) { run_hybrid(Model::kMlp); }, 4);
}

TEST(ZeroHybrid, GptWithClippingShardedInPairsOfFourRanksMatchesDdpAndOneProcess) {
  spawn([](int) { run_hybrid(Model::kGpt); }, 4);
}

// The groups, and per-rank model state and bytes per step against the
// formulas with N = S (zero_model_state_bytes) and hybrid_traffic_bytes, on
// an MLP whose tensors divide by 2 (no padding); bf16 halves both the
// reduce_scatter and the replicas' all_reduce.
void run_hybrid_accounting(int rank) {
  auto pg = join();
  constexpr int kShard = 2;
  const int replicas = pg->size() / kShard;
  const nn::MlpOptions mlp{.in_features = 64, .width = 64, .hidden_layers = 2, .classes = 8};
  Generator data(7);
  Tensor x = rand({8, 64}, data), y = randint(0, 8, {8}, data);
  for (int stage = 1; stage <= 3; ++stage) {
    ZeroTrafficStats step_bytes[2];
    for (DType wire : {DType::kFloat32, DType::kBFloat16}) {
      Generator gen(42);
      auto model = nn::make_mlp(gen, mlp);
      const int64_t psi = model->num_parameters();
      ShardedDataParallel zero(model, pg,
                               {.stage = stage, .reduce_dtype = wire, .hybrid_shard_size = kShard});
      if (zero.shard_group().size() != kShard || zero.shard_group().rank() != rank % kShard ||
          zero.replicate_group() == nullptr || zero.replicate_group()->size() != replicas ||
          zero.replicate_group()->rank() != rank / kShard)
        throw Error(fmt::format("rank {}: shard group rank {} of {}, replicate group {}", rank,
                                zero.shard_group().rank(), zero.shard_group().size(),
                                zero.replicate_group() ? zero.replicate_group()->rank() : -1));
      ShardedOptimizer opt(
          zero, std::make_unique<optim::AdamW>(zero.shard_parameters(), optim::AdamWOptions{}));
      ZeroTrafficStats before;
      for (int s = 0; s < 2; ++s) {
        before = zero.traffic();
        opt.zero_grad();
        nll_loss(zero(x), y).backward();
        opt.step();
      }
      ZeroTrafficStats& d = step_bytes[wire == DType::kBFloat16];
      d.reduce_scatter_bytes = zero.traffic().reduce_scatter_bytes - before.reduce_scatter_bytes;
      d.all_gather_bytes = zero.traffic().all_gather_bytes - before.all_gather_bytes;
      d.all_reduce_bytes = zero.traffic().all_reduce_bytes - before.all_reduce_bytes;
      if (wire == DType::kBFloat16) continue;
      ZeroMemoryStats ms = zero.memory_stats();
      const double state =
          static_cast<double>(ms.parameter_bytes + ms.gradient_bytes + opt.state_bytes());
      const double want_state = zero_model_state_bytes(stage, psi, kShard);
      const double traffic = static_cast<double>(d.total());
      const double want_traffic = hybrid_traffic_bytes(stage, psi, kShard, replicas);
      if (rank == 0)
        std::printf(
            "N=%d as %d x %d, stage %d: model state %.0f B (formula %.0f, %.3fx), traffic %.0f "
            "B/step (formula %.0f, %.3fx; replicas' all_reduce %.0f B)\n",
            pg->size(), replicas, kShard, stage, state, want_state, state / want_state, traffic,
            want_traffic, traffic / want_traffic, double(d.all_reduce_bytes));
      if (std::fabs(state / want_state - 1) > 0.1 || std::fabs(traffic / want_traffic - 1) > 0.1)
        throw Error(fmt::format("rank {}, stage {}: state {} B vs {} B, traffic {} B vs {} B", rank,
                                stage, state, want_state, traffic, want_traffic));
    }
    const ZeroTrafficStats &f = step_bytes[0], &h = step_bytes[1];
    if (h.reduce_scatter_bytes * 2 != f.reduce_scatter_bytes ||
        h.all_reduce_bytes * 2 != f.all_reduce_bytes || f.all_reduce_bytes == 0 ||
        h.all_gather_bytes != f.all_gather_bytes)
      throw Error(fmt::format(
          "rank {}, stage {}: bf16 moved reduce_scatter {} / all_reduce {} / all_gather {} B, "
          "float32 {} / {} / {} B",
          rank, stage, h.reduce_scatter_bytes, h.all_reduce_bytes, h.all_gather_bytes,
          f.reduce_scatter_bytes, f.all_reduce_bytes, f.all_gather_bytes));
  }
  distributed::destroy_process_group(pg);
}

TEST(ZeroHybrid, ModelStateAndTrafficBytesMatchTheFormulasFourRanks) {
  spawn(run_hybrid_accounting, 4);
}

TEST(ZeroHybrid, ShardSizeThatDoesNotDivideTheWorldIsRefused) {
  spawn(
      [](int rank) {
        auto pg = join();
        try {
          ShardedDataParallel zero(make_model(Model::kMlp, rank), pg,
                                   {.stage = 2, .hybrid_shard_size = 3});
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("hybrid_shard_size 3 does not divide the group of 4") !=
              std::string::npos)
            return;
          throw;
        }
        throw Error("hybrid_shard_size 3 over 4 ranks was accepted");
      },
      4);
}

}  // namespace
}  // namespace cohort::parallel
