// A GPT (nn/models/gpt.h) as a pipeline (parallel/pipeline/gpt_pipeline.h),
// with real processes (cohort::spawn), checked against one process training
// the plain model on the same batches: 20 AdamW steps (nanoGPT's weight-decay
// groups, gradient clipping) of a tiny GPT under gpipe, 1f1b, interleaved and
// zb-h1 schedules on 2 and 4 ranks, pipeline x data (2 stages x 2 replicas), a
// pipeline of one rank (embedding and head on one rank: one tensor, nothing
// to sum) and data parallel over single-stage pipelines. The tied
// embedding/head weight lives on the first and last ranks and must stay
// identical there. Checkpoints: the pipeline's full state loads into the
// plain model and back. Each rank computes the reference itself and throws
// on a mismatch, which spawn reports.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/pipeline/gpt_pipeline.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace cohort::parallel::pipeline {
namespace {

using namespace std::chrono_literals;

using namespace testing_util;

std::shared_ptr<nn::GPT> make_gpt(int64_t layers, uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::GPT>(tiny_gpt(layers), gen);
}

// Step `step`'s global batch of windows (the same on every rank): idx and
// the next tokens.
std::pair<Tensor, Tensor> batch_of(int step, int64_t rows) {
  Generator gen(900 + static_cast<uint64_t>(step));
  return token_windows(gen, rows);
}

constexpr double kClip = 1.0;
constexpr int kSteps = 20;

struct Reference {
  std::vector<double> losses;
  TensorDict state;
};

Reference train_reference(int64_t layers, int64_t rows) {
  auto model = make_gpt(layers, 7);
  auto opt = make_adamw(model->named_parameters());
  Reference ref;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch_of(s, rows);
    opt->zero_grad();
    Tensor loss = model->forward(x, y);
    loss.backward();
    optim::clip_grad_norm(model->parameters(), kClip);
    opt->step();
    ref.losses.push_back(loss.item<double>());
  }
  for (auto& [name, t] : model->state_dict()) ref.state.insert(name, t.clone());
  return ref;
}

struct Case {
  Schedule schedule = Schedule::k1F1B;
  int world = 2;
  int stages = 2;  // pipeline ranks; world / stages replicas
  int micro_batches = 4;
  int64_t rows = 8;  // global batch
  int64_t layers = 2;
};

void run_equivalence(const Case& c) {
  spawn(
      [c](int) {
        KernelPathGuard exact_kernels(KernelPath::kBaseline);
        auto world = join();
        const int rank = world->rank();
        Reference ref = train_reference(c.layers, c.rows);
        auto grid = make_pipeline_grid(world, c.stages);
        // Other replicas, and the last stage's copy of the tied weight, start
        // elsewhere: the pipeline must set them from replica 0's first stage.
        auto gpt = make_gpt(c.layers, grid.replica == 0 && grid.stage == 0 ? 7 : 99);
        if (grid.replica == 0 && grid.stage != 0) {
          auto seven = make_gpt(c.layers, 7);
          TensorDict sd = seven->state_dict();
          sd.insert_or_assign("transformer.wte.weight", gpt->wte().weight().clone());
          sd.insert_or_assign("lm_head.weight", gpt->wte().weight().clone());
          gpt->load_state_dict(sd);
        }
        auto pipe = make_gpt_pipeline(*gpt, grid,
                                      {.schedule = c.schedule, .micro_batches = c.micro_batches});
        auto opt = make_adamw(pipe->named_parameters());
        const int64_t per_replica = c.rows / grid.replicas;
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = batch_of(s, c.rows);
          x = x.narrow(0, grid.replica * per_replica, per_replica);
          y = y.narrow(0, grid.replica * per_replica, per_replica);
          opt->zero_grad();
          const double loss = pipe->step(x, y, gpt_loss_fn);
          pipe->clip_grad_norm(kClip);
          opt->step();
          const double want = ref.losses[static_cast<size_t>(s)];
          if (std::fabs(loss - want) > 1e-4 * std::max(1.0, std::fabs(want)))
            throw Error(
                fmt::format("rank {}: step {} loss {} vs one process {}", rank, s, loss, want));
        }
        for (auto& [name, t] : pipe->named_parameters())
          check_close(t, ref.state.at(name), "parameter " + name, rank);
        // Both copies of the tied weight took the same steps.
        if (pipe->is_last())
          check_close(gpt->lm_head().weight(), ref.state.at("lm_head.weight"), "lm_head.weight",
                      rank);
        // The whole state on pipeline rank 0 loads into the plain model.
        TensorDict full = pipe->full_state_dict();
        if (grid.stage == 0) {
          auto plain = make_gpt(c.layers, 123);
          plain->load_state_dict(full);  // strict: every key, both tied names
          for (const auto& [name, t] : ref.state) check_close(full.at(name), t, name, rank);
        }
        distributed::destroy_process_group(world);
      },
      c.world);
}

TEST(GPTPipeline, GPipeMatchesOneProcess) { run_equivalence({.schedule = Schedule::kGPipe}); }

TEST(GPTPipeline, OneFOneBMatchesOneProcess) {
  run_equivalence({.schedule = Schedule::k1F1B, .layers = 3});
}

TEST(GPTPipeline, FourStagesMatchOneProcess) {
  run_equivalence({.schedule = Schedule::k1F1B, .world = 4, .stages = 4, .micro_batches = 4});
}

TEST(GPTPipeline, InterleavedMatchesOneProcess) {
  // 4 stages on 2 ranks: rank 0 holds the embedding and rank 1 the head.
  run_equivalence({.schedule = Schedule::kInterleaved, .micro_batches = 4, .layers = 3});
}

TEST(GPTPipeline, ZeroBubbleMatchesOneProcess) {
  // The weight gradients (W) run late: the tied sum must wait for them.
  run_equivalence({.schedule = Schedule::kZeroBubbleH1});
}

TEST(GPTPipeline, TwoReplicasOfTwoStagesMatchOneProcess) {
  run_equivalence({.schedule = Schedule::k1F1B, .world = 4, .stages = 2});
}

TEST(GPTPipeline, EmbeddingAndHeadOnOneRank) {
  // One rank of two virtual stages: the tied weight is one tensor there,
  // listed once; and two replicas of one-stage pipelines.
  run_equivalence({.schedule = Schedule::kInterleaved, .world = 1, .stages = 1});
  run_equivalence({.schedule = Schedule::kGPipe, .world = 2, .stages = 1});
}

TEST(GPTPipeline, CheckpointOfThePlainModelLoads) {
  spawn(
      [](int) {
        KernelPathGuard exact_kernels(KernelPath::kBaseline);
        auto world = join();
        const int rank = world->rank();
        auto grid = make_pipeline_grid(world, 2);
        auto reference = make_gpt(2, 7);
        auto [x, y] = batch_of(0, 6);
        Tensor want = reference->forward(x);
        auto gpt = make_gpt(2, 321);
        auto pipe = make_gpt_pipeline(*gpt, grid, {.micro_batches = 3});
        pipe->load_state_dict(reference->state_dict());
        Tensor got = pipe->forward(x);
        if (rank == 1) check_close(got, want, "pipeline logits after load_state_dict", rank);
        // Keys are the plain model's: this rank's part names them.
        TensorDict mine = pipe->state_dict();
        const char* key = rank == 0 ? "transformer.wte.weight" : "lm_head.weight";
        if (mine.find(key) == nullptr)
          throw Error(fmt::format("rank {}: state_dict lacks {}", rank, key));
        try {
          pipe->load_state_dict(TensorDict());
          throw Error("an empty dict loaded");
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find(key) == std::string::npos) throw;
        }
        distributed::destroy_process_group(world);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel::pipeline
