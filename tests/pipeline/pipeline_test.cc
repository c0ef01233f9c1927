// Pipeline parallelism with real processes (cohort::spawn), checked against
// single-process training on the same samples: every schedule (gpipe, 1f1b,
// interleaved, zb-h1) over 2 and 4 ranks, on the MLP (width 64) and on Net
// (as a Sequential, exact conv kernels), several SGD steps with gradient
// clipping, losses and parameters compared; pipeline x data parallel (2
// replicas x 2 stages) against one process on the global batch; checkpoints
// from the pipeline into one process and back. Each rank computes the
// reference itself and throws on a mismatch, which spawn reports.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace cohort::parallel::pipeline {
namespace {

using namespace std::chrono_literals;

enum class ModelKind { kMlp, kNet };

using namespace testing_util;

std::shared_ptr<nn::Sequential> make_model(ModelKind kind, uint64_t seed) {
  Generator gen(seed);
  if (kind == ModelKind::kNet) return nn::make_net_sequential(gen);
  return nn::make_mlp(gen, {.width = 64, .hidden_layers = 4});
}

// Step `step`'s global batch (the same on every rank).
std::pair<Tensor, Tensor> batch_of(int step, int64_t rows) {
  Generator gen(500 + static_cast<uint64_t>(step));
  return {rand({rows, 1, 28, 28}, gen), randint(0, 10, {rows}, gen)};
}

optim::SGD make_sgd(std::vector<Tensor> params) {
  return optim::SGD(std::move(params), {.lr = 0.05, .momentum = 0.9});
}

constexpr double kClip = 1.0;

struct Reference {
  std::vector<double> losses;
  TensorDict params;
};

Reference train_reference(ModelKind kind, int steps, int64_t rows) {
  auto model = make_model(kind, 7);
  auto opt = make_sgd(model->parameters());
  Reference ref;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s, rows);
    opt.zero_grad();
    Tensor loss = nll_loss(model->forward(x), y);
    loss.backward();
    optim::clip_grad_norm(model->parameters(), kClip);
    opt.step();
    ref.losses.push_back(loss.item<double>());
  }
  for (auto& [name, t] : model->named_parameters()) ref.params.insert(name, t.clone());
  return ref;
}

struct Case {
  Schedule schedule = Schedule::k1F1B;
  int world = 2;
  int stages = 2;  // pipeline ranks; world / stages replicas
  int micro_batches = 4;
  int64_t rows = 22;  // global batch; 22 over 4 micro-batches: 6, 6, 5, 5 rows
  ModelKind model = ModelKind::kMlp;
  int steps = 3;
  bool measure = false;  // balance by measured costs (else by parameter count)
};

void run_equivalence(const Case& c) {
  spawn(
      [c](int) {
        KernelPathGuard exact_kernels(KernelPath::kBaseline);
        auto world = join();
        const int rank = world->rank();
        Reference ref = train_reference(c.model, c.steps, c.rows);
        auto grid = make_pipeline_grid(world, c.stages);
        // Replicas other than 0 start from other weights: the pipeline must
        // broadcast replica 0's.
        auto model = make_model(c.model, grid.replica == 0 ? 7 : 99);
        PipelineOptions opts{.schedule = c.schedule, .micro_batches = c.micro_batches};
        if (c.measure)
          opts.sample_input = batch_of(0, c.rows / grid.replicas / c.micro_batches).first;
        Pipeline pipe(model, grid, opts);
        // A stage may hold only parameter-free layers (flatten): no optimizer there.
        std::unique_ptr<optim::SGD> opt;
        if (!pipe.parameters().empty())
          opt = std::make_unique<optim::SGD>(pipe.parameters(),
                                             optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
        const int64_t per_replica = c.rows / grid.replicas;
        for (int s = 0; s < c.steps; ++s) {
          auto [x, y] = batch_of(s, c.rows);
          x = x.narrow(0, grid.replica * per_replica, per_replica);
          y = y.narrow(0, grid.replica * per_replica, per_replica);
          pipe.zero_grad();
          double loss = pipe.step(x, y, nll_loss_fn);
          pipe.clip_grad_norm(kClip);
          if (opt) opt->step();
          const double want = ref.losses[static_cast<size_t>(s)];
          if (std::fabs(loss - want) > 1e-4 * std::max(1.0, std::fabs(want)))
            throw Error(
                fmt::format("rank {}: step {} loss {} vs one process {}", rank, s, loss, want));
          const PipelineStats& st = pipe.last_stats();
          // GPipe holds every micro-batch; 1F1B and ZB-H1 at most p (the
          // first stage exactly p when m >= p).
          if (c.schedule == Schedule::kGPipe && st.peak_in_flight != c.micro_batches)
            throw Error(fmt::format("rank {}: gpipe held {} micro-batches, not {}", rank,
                                    st.peak_in_flight, c.micro_batches));
          if ((c.schedule == Schedule::k1F1B || c.schedule == Schedule::kZeroBubbleH1) &&
              st.peak_in_flight > c.stages)
            throw Error(fmt::format("rank {}: {} held {} micro-batches, more than p = {}", rank,
                                    schedule_name(c.schedule), st.peak_in_flight, c.stages));
          if (st.peak_in_flight < 1 || st.peak_in_flight > c.micro_batches * pipe.chunks() ||
              st.peak_activation_bytes <= 0 || st.actions <= 0)
            throw Error(fmt::format("rank {}: implausible stats", rank));
        }
        for (auto& [name, t] : pipe.named_parameters())
          check_close(t, ref.params.at(name), "parameter " + name, rank);
        distributed::destroy_process_group(world);
      },
      c.world);
}

class PipelineWorld2 : public ::testing::TestWithParam<Schedule> {};

TEST_P(PipelineWorld2, MlpMatchesOneProcess) {
  run_equivalence({.schedule = GetParam(), .world = 2, .stages = 2, .measure = true});
}

TEST_P(PipelineWorld2, NetMatchesOneProcess) {
  run_equivalence({.schedule = GetParam(), .model = ModelKind::kNet, .steps = 2});
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineWorld2,
                         ::testing::Values(Schedule::kGPipe, Schedule::k1F1B,
                                           Schedule::kInterleaved, Schedule::kZeroBubbleH1),
                         [](const auto& info) {
                           std::string n(schedule_name(info.param));
                           std::erase(n, '-');
                           return "s" + n;
                         });

class PipelineWorld4 : public ::testing::TestWithParam<Schedule> {};

TEST_P(PipelineWorld4, MlpMatchesOneProcess) {
  run_equivalence(
      {.schedule = GetParam(), .world = 4, .stages = 4, .micro_batches = 8, .rows = 30});
}

TEST_P(PipelineWorld4, NetMatchesOneProcess) {
  run_equivalence({.schedule = GetParam(),
                   .world = 4,
                   .stages = 4,
                   .micro_batches = 4,
                   .rows = 16,
                   .model = ModelKind::kNet,
                   .steps = 2});
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineWorld4,
                         ::testing::Values(Schedule::k1F1B, Schedule::kInterleaved,
                                           Schedule::kZeroBubbleH1),
                         [](const auto& info) {
                           std::string n(schedule_name(info.param));
                           std::erase(n, '-');
                           return "s" + n;
                         });

TEST(PipelineData, TwoReplicasOfTwoStagesMatchOneProcess) {
  run_equivalence({.schedule = Schedule::k1F1B, .world = 4, .stages = 2, .rows = 32});
  run_equivalence({.schedule = Schedule::kZeroBubbleH1,
                   .world = 4,
                   .stages = 2,
                   .rows = 32,
                   .model = ModelKind::kNet,
                   .steps = 2});
}

TEST(PipelineData, OneStagePerReplicaAndOneRank) {
  // dp 2 x pp 1 (a pipeline group of one), and one rank running two virtual
  // stages (stages handed over locally, no send/recv).
  run_equivalence({.schedule = Schedule::kZeroBubbleH1, .world = 2, .stages = 1});
  run_equivalence({.schedule = Schedule::kInterleaved, .world = 1, .stages = 1});
}

// A message that is not the one the schedule expects is named with both values.
TEST(PipelineChannel, HeaderMismatchIsNamed) {
  spawn(
      [](int) {
        auto world = join();
        StageChannel channel(*world);
        Tensor t = Tensor::ones({3, 2});
        if (world->rank() == 0) {
          channel.send(t, {.gradient = false, .mb = 1, .stage = 1, .step = 1}, 1);
          channel.send(t, {.gradient = true, .mb = 2, .stage = 1, .step = 1}, 1);
          channel.wait_sends();
        } else {
          try {
            channel.recv({.gradient = false, .mb = 0, .stage = 1, .step = 1}, 0);
            throw Error("a message of micro-batch 1 passed for micro-batch 0");
          } catch (const Error& e) {
            std::string m = e.what();
            if (m.find("rank 1 expected from rank 0") == std::string::npos ||
                m.find("micro-batch is 1 where 0 was expected") == std::string::npos)
              throw Error("mismatch message lacks the ranks or the values: " + m);
          }
          Shape want{3, 3};
          try {
            channel.recv({.gradient = true, .mb = 2, .stage = 1, .step = 1}, 0, &want);
            throw Error("a gradient of the wrong shape passed");
          } catch (const Error& e) {
            if (std::string(e.what()).find("shape is [3, 2] where [3, 3] was expected") ==
                std::string::npos)
              throw Error(std::string("shape mismatch not named: ") + e.what());
          }
        }
        distributed::destroy_process_group(world);
      },
      2);
}

TEST(PipelineCheckpoint, RoundTripWithOneProcess) {
  spawn(
      [](int) {
        auto world = join();
        const int rank = world->rank();
        auto grid = make_pipeline_grid(world, 2);
        auto [x, y] = batch_of(0, 10);
        auto reference = make_model(ModelKind::kMlp, 7);
        Tensor want = reference->forward(x);
        // Pipeline -> one process: the gathered dict loads into a fresh model.
        Pipeline pipe(make_model(ModelKind::kMlp, 7), grid, {.micro_batches = 3});
        TensorDict full = pipe.full_state_dict();
        Tensor got = pipe.forward(x);
        if (rank == 0) {
          if (full.size() != reference->state_dict().size())
            throw Error(fmt::format("full_state_dict has {} keys, the model {}", full.size(),
                                    reference->state_dict().size()));
          auto single = make_model(ModelKind::kMlp, 123);
          single->load_state_dict(full);  // strict
          if (!equal(single->forward(x), want)) throw Error("loaded model's output differs");
          if (got.defined()) throw Error("forward output on the first stage");
        } else {
          check_close(got, want, "pipeline forward", rank);
        }
        // One process -> pipeline: a pipeline of other weights takes the full dict.
        Pipeline other(make_model(ModelKind::kMlp, 321), grid, {.schedule = Schedule::kGPipe});
        Tensor before = other.forward(x);
        if (rank == 1 && allclose(before, want, 1e-3, 1e-5))
          throw Error("the pipeline of other weights already matched");
        other.load_state_dict(reference->state_dict());
        Tensor again = other.forward(x);
        if (rank == 1) check_close(again, want, "pipeline after load_state_dict", rank);
        TensorDict back = other.full_state_dict();
        if (rank == 0)
          for (const auto& [name, t] : reference->state_dict())
            if (!equal(back.at(name), t)) throw Error("round trip changed " + name);
        // Missing keys of this rank's stages are named.
        try {
          other.load_state_dict(TensorDict());
          throw Error("an empty dict loaded");
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("missing keys") == std::string::npos) throw;
        }
        distributed::destroy_process_group(world);
      },
      2);
}

TEST(PipelineErrors, TooFewLayersAndBadMicroBatches) {
  spawn(
      [](int) {
        auto world = join();
        auto grid = make_pipeline_grid(world, 2);
        Generator gen(1);
        auto tiny = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
            std::make_shared<nn::Linear>(4, 4, gen), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Linear>(4, 4, gen)});
        try {
          Pipeline pipe(tiny, grid, {.schedule = Schedule::kInterleaved, .micro_batches = 2});
          throw Error("interleaved accepted 3 layers for 4 stages");
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("only 3 children") == std::string::npos) throw;
        }
        try {
          Pipeline pipe(tiny, grid, {.schedule = Schedule::kInterleaved, .micro_batches = 3});
          throw Error("interleaved accepted 3 micro-batches on 2 ranks");
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("multiple of the pipeline ranks") == std::string::npos)
            throw;
        }
        distributed::destroy_process_group(world);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel::pipeline
