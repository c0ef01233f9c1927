// ZeRO under the pipeline (PipelineOptions::zero_stage), with real processes
// (cohort::spawn): 4 ranks as 2 stages x 2 replicas, each stage's gradients
// reduce-scattered over its replicas and its AdamW state sharded there
// (stages 1 and 2). 20 steps with gradient clipping on the MLP (1F1B,
// interleaved, ZB-H1) and on a tiny
// GPT (its tied embedding/head on the first and last stage) must equal the
// plain pipeline (the bucketed all_reduce over replicas) to fp32 tolerance,
// losses and parameters; each rank's optimizer state is the plain one's / 2
// up to the padding of the shards, and stage 2's gradients too; the bytes
// moved over dp per step are one reduce_scatter and one all_gather of the
// padded layouts (2 psi of the stage, as DDP's all_reduce). Unsupported
// combinations (stage 3, one replica) are named errors. Each rank throws on
// a mismatch, which spawn reports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/adam.h"
#include "cohort/parallel/pipeline/gpt_pipeline.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "cohort/parallel/zero/sharded_optimizer.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace cohort::parallel::pipeline {
namespace {

using namespace std::chrono_literals;

constexpr int kSteps = 20;
constexpr double kClip = 0.5;
constexpr int64_t kRows = 16;  // global batch, 8 per replica

using namespace testing_util;

enum class Model { kMlp, kGpt };

std::pair<Tensor, Tensor> batch_of(Model model, int step) {
  Generator gen(700 + static_cast<uint64_t>(step));
  if (model == Model::kMlp) return {rand({kRows, 1, 28, 28}, gen), randint(0, 10, {kRows}, gen)};
  return token_windows(gen, kRows);
}

struct Run {
  std::vector<double> losses;
  TensorDict params;
  size_t optimizer_state_bytes = 0;
  size_t gradient_bytes = 0;  // ZeRO: what the wrapper keeps
  size_t stage_parameter_bytes = 0;
  size_t stage_tensors = 0;
  // ZeRO: bytes passed to the dp group per step, and what the layouts say
  // they must be (a reduce_scatter and an all_gather of the padded buffers).
  double traffic_per_step = 0, padded_bytes = 0;
};

Run train(Model model, Schedule schedule, const PipelineGrid& grid, int zero_stage) {
  PipelineOptions po{.schedule = schedule, .micro_batches = 4};
  po.zero_stage = zero_stage;
  std::unique_ptr<Pipeline> pipe;
  std::shared_ptr<nn::GPT> gpt;
  LossFn loss_fn;
  if (model == Model::kMlp) {
    Generator gen(11);
    pipe =
        std::make_unique<Pipeline>(nn::make_mlp(gen, {.width = 64, .hidden_layers = 3}), grid, po);
    loss_fn = nll_loss_fn;
  } else {
    Generator gen(11);
    gpt = std::make_shared<nn::GPT>(tiny_gpt(), gen);
    pipe = make_gpt_pipeline(*gpt, grid, po);
    loss_fn = gpt_loss_fn;
  }
  ShardedDataParallel* zero = pipe->zero();
  if ((zero != nullptr) != (zero_stage != 0))
    throw Error(fmt::format("zero_stage {} but zero() is {}", zero_stage, zero ? "set" : "null"));
  auto adamw = make_adamw(pipe->named_parameters(),
                          [&](const Tensor& p) { return zero ? zero->shard_of(p) : p; });
  std::unique_ptr<ShardedOptimizer> sharded;
  optim::Optimizer* opt = adamw.get();
  if (zero) sharded = std::make_unique<ShardedOptimizer>(*zero, std::move(adamw));
  Run run;
  const int64_t per_replica = kRows / grid.replicas;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch_of(model, s);
    x = x.narrow(0, grid.replica * per_replica, per_replica);
    y = y.narrow(0, grid.replica * per_replica, per_replica);
    pipe->zero_grad();
    run.losses.push_back(pipe->step(x, y, loss_fn));
    pipe->clip_grad_norm(kClip);
    if (sharded)
      sharded->step();
    else
      opt->step();
  }
  for (auto& [name, t] : pipe->named_parameters()) {
    run.params.insert(name, t.clone());
    run.stage_parameter_bytes += t.nbytes();
    ++run.stage_tensors;
  }
  run.optimizer_state_bytes = sharded ? sharded->state_bytes() : optimizer_state_bytes(*opt);
  if (zero) {
    run.gradient_bytes = zero->memory_stats().gradient_bytes;
    run.traffic_per_step = double(zero->traffic().total()) / kSteps;
    for (size_t u = 0; u < zero->num_units(); ++u)
      run.padded_bytes += double(zero->unit_layout(u).total_numel()) * 4;
  }
  return run;
}

void expect_equal(const Run& got, const Run& want, const std::string& what, int rank) {
  for (size_t s = 0; s < want.losses.size(); ++s) {
    if (std::fabs(got.losses[s] - want.losses[s]) > 1e-5 * std::max(1.0, std::fabs(want.losses[s])))
      throw Error(fmt::format("rank {}: {}: step {} loss {} vs the plain pipeline's {}", rank, what,
                              s, got.losses[s], want.losses[s]));
  }
  for (const auto& [name, t] : want.params) {
    const Tensor& g = got.params.at(name);
    if (!allclose(g, t, 1e-4, 1e-6)) {
      std::vector<float> a = g.to_vector<float>(), b = t.to_vector<float>();
      double worst = 0;
      for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, double(std::fabs(a[k] - b[k])));
      throw Error(
          fmt::format("rank {}: {}: parameter {} differs from the plain pipeline's (max "
                      "|diff| {})",
                      rank, what, name, worst));
    }
  }
}

void run_equivalence(Model model, Schedule schedule = Schedule::k1F1B) {
  spawn(
      [model, schedule](int) {
        KernelPathGuard exact_kernels(KernelPath::kBaseline);
        auto world = join();
        const int rank = world->rank();
        auto grid = make_pipeline_grid(world, 2);
        const int R = grid.replicas;
        const Run plain = train(model, schedule, grid, 0);
        for (int stage : {1, 2}) {
          const Run z = train(model, schedule, grid, stage);
          const std::string what = fmt::format("ZeRO stage {} under the pipeline", stage);
          expect_equal(z, plain, what, rank);
          // AdamW keeps two moments (and a step count) per element: the
          // shards' state is the plain state / R, up to each tensor's
          // padding (under R elements) and the per-tensor step counts.
          const double pad = double(plain.stage_tensors) * (2.0 * R * 4 + 8);
          const double want = double(plain.optimizer_state_bytes) / R;
          if (std::fabs(double(z.optimizer_state_bytes) - want) > pad)
            throw Error(fmt::format(
                "rank {}: {}: optimizer state {} bytes, want {} / {} = {} "
                "(within {})",
                rank, what, z.optimizer_state_bytes, plain.optimizer_state_bytes, R, want, pad));
          if (z.traffic_per_step != 2 * z.padded_bytes)
            throw Error(
                fmt::format("rank {}: {}: {} bytes per step over dp, want a "
                            "reduce_scatter and an all_gather of {} bytes",
                            rank, what, z.traffic_per_step, z.padded_bytes));
          if (grid.replica == 0)
            std::printf(
                "stage %d of the pipeline, ZeRO %d: optimizer state %zu bytes (plain %zu), "
                "gradients %zu bytes (parameters %zu)\n",
                grid.stage, stage, z.optimizer_state_bytes, plain.optimizer_state_bytes,
                z.gradient_bytes, plain.stage_parameter_bytes);
          // Stage 1 keeps the full gradients, stage 2 this rank's shard.
          const double grads = stage == 1 ? double(plain.stage_parameter_bytes)
                                          : double(plain.stage_parameter_bytes) / R;
          if (std::fabs(double(z.gradient_bytes) - grads) > double(plain.stage_tensors) * R * 4)
            throw Error(fmt::format("rank {}: {}: {} gradient bytes, want about {}", rank, what,
                                    z.gradient_bytes, grads));
        }
        distributed::destroy_process_group(world);
      },
      4);
}

TEST(PipelineZero, MlpStages1And2MatchThePlainPipeline) { run_equivalence(Model::kMlp); }

// Two chunks per rank (one ShardedDataParallel over both) and ZB-H1's
// deferred weight gradients.
TEST(PipelineZero, MlpUnderInterleavedAndZeroBubbleSchedules) {
  run_equivalence(Model::kMlp, Schedule::kInterleaved);
  run_equivalence(Model::kMlp, Schedule::kZeroBubbleH1);
}

TEST(PipelineZero, GptWithTiedWeightsStages1And2MatchThePlainPipeline) {
  run_equivalence(Model::kGpt);
}

TEST(PipelineZero, UnsupportedCombinationsAreNamed) {
  spawn(
      [](int) {
        auto world = join();
        auto expect_error = [&](const PipelineGrid& grid, int stage, const std::string& words) {
          Generator gen(3);
          try {
            Pipeline pipe(nn::make_mlp(gen, {.width = 16, .hidden_layers = 1}), grid,
                          {.zero_stage = stage});
          } catch (const InvalidArgument& e) {
            if (std::string(e.what()).find(words) == std::string::npos)
              throw Error(fmt::format("zero_stage {}: the error does not say '{}': {}", stage,
                                      words, e.what()));
            return;
          }
          throw Error(fmt::format("zero_stage {} was accepted", stage));
        };
        // 2 ranks as 1 stage x 2 replicas: stage 3 is refused, naming 1 and 2.
        expect_error(make_pipeline_grid(world, 1), 3, "use 1");
        // 2 stages x 1 replica: nothing to shard over.
        expect_error(make_pipeline_grid(world, 2), 1, "1 replica");
        distributed::destroy_process_group(world);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel::pipeline
