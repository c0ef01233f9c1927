// Sharded checkpoints of ZeRO with real processes (cohort::spawn): a run at
// 4 ranks saves its shards (no gathering), and the checkpoint resumes at 2,
// at 1 and back at 4 ranks (with other stages) with the same next-step loss
// and parameters as one uninterrupted run; `cohort reshard`'s conversion of
// it to a whole checkpoint loads into a plain one-process model.
// Every run trains the same global batch of 16 split over its W ranks, so
// each step's averaged gradient is the whole batch's at any world size; the
// loss compared is the global batch's (the ranks' losses averaged).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cohort/base/cpu.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/checkpoint/zero_checkpoint.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "tests/zero/zero_test_models.h"

namespace cohort::parallel {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using zero_testing::kBatch;
using zero_testing::kClip;
using zero_testing::tiny_gpt;

// A GPT (AdamW in two groups, clipping): tensors of every size, scalars and
// group options in the optimizer state. `seed` differs per run and rank so
// that only the checkpoint can make them agree.
std::shared_ptr<nn::GPT> make_gpt(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::GPT>(tiny_gpt(), gen);
}

using zero_testing::Batch;
Batch batch_of(int step) { return zero_testing::batch_of(zero_testing::Model::kGpt, step); }

// One process, the whole batch, `steps` steps: the loss of every step and
// the parameters after.
struct Reference {
  std::vector<double> losses;
  nn::NamedTensors params;
};

Reference train_reference(int steps) {
  auto model = make_gpt(42);
  auto opt = zero_testing::gpt_adamw(*model, [](const Tensor& t) { return t; });
  Reference r;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    Batch b = batch_of(s);
    Tensor loss = model->forward(b.x, b.y);
    r.losses.push_back(loss.item<double>());
    loss.backward();
    optim::clip_grad_norm(model->parameters(), kClip);
    opt->step();
  }
  for (const auto& [name, t] : model->named_parameters()) r.params.emplace_back(name, t.clone());
  return r;
}

// A ZeRO run at this job's world size and `stage`: resumes from `resume`
// (when not empty), trains steps [from, to) checking each global loss
// against the reference, saves at `to` under root (when not empty) and
// checks the parameters against the reference's after `to` steps.
void zero_run(int stage, const std::string& resume, int from, int to, const std::string& root) {
  KernelPathGuard exact_kernels(KernelPath::kBaseline);
  auto pg = distributed::init_process_group("native", "env://", -1, -1, 60s);
  const int rank = pg->rank(), world = pg->size();
  auto model = make_gpt(rank == 0 && resume.empty() ? 42 : 77 + static_cast<uint64_t>(rank));
  ShardedDataParallel zero(model, pg,
                           {.stage = stage, .unit_policy = module_type_policy({"Block"})});
  ShardedOptimizer opt(
      zero, zero_testing::gpt_adamw(*model, [&](const Tensor& t) { return zero.shard_of(t); }));
  if (!resume.empty()) {
    auto src = checkpoint::open_checkpoint(resume);
    if (src->state().step != from) throw Error("resumed at the wrong step");
    checkpoint::load_zero_checkpoint(*src, opt);
    // Stage 3 reads its chunks (1/N of the bytes) and the small tensors whole.
    uint64_t total = 0;
    for (const auto& e : src->tensors()) total += e.numel() * dtype_size(e.dtype);
    if (stage == 3 && src->bytes_read() > total / world + 2048)
      throw Error(fmt::format("stage 3 at {} ranks read {} of the checkpoint's {} bytes", world,
                              src->bytes_read(), total));
  }
  const Reference ref = train_reference(to + 1);
  const std::string what = fmt::format("stage {} at {} ranks, rank {}", stage, world, rank);
  for (int s = from; s < to; ++s) {
    opt.zero_grad();
    Batch all = batch_of(s);
    const int64_t n = kBatch / world;
    Tensor x = all.x.narrow(0, rank * n, n), y = all.y.narrow(0, rank * n, n);
    Tensor loss = zero.forward_with([&](nn::Module& m) { return model->forward(x, y); });
    const double global = zero.all_reduce_sum(loss.item<double>()) / world;
    if (std::fabs(global - ref.losses[s]) > 1e-5 * std::fabs(ref.losses[s]))
      throw Error(fmt::format("{}: step {} loss {:.9g}, the uninterrupted run's {:.9g}", what,
                              s + 1, global, ref.losses[s]));
    loss.backward();
    opt.clip_grad_norm(kClip);
    opt.step();
  }
  if (!root.empty()) {
    checkpoint::TrainingState st;
    st.step = to;
    const uint64_t moved = zero.traffic().total();
    checkpoint::save_zero_checkpoint(opt, root, st);
    if (zero.traffic().total() != moved) throw Error("saving gathered the shards");
  }
  zero.summon_full_params();
  const nn::NamedTensors got = model->named_parameters();
  const Reference after = train_reference(to);
  for (size_t i = 0; i < got.size(); ++i)
    if (!allclose(got[i].second, after.params[i].second, 1e-3, 1e-5))
      throw Error(fmt::format("{}: parameter {} after {} steps differs from the uninterrupted run",
                              what, got[i].first, to));
  distributed::destroy_process_group(pg);
}

// Odd (zero_test_models.h): tensors smaller than the world size (empty
// chunks at 4 and 3 ranks) and frozen parameters.
using zero_testing::Odd;

// Every parameter and every optimizer state tensor (gathered) equals the
// checkpoint's, bit for bit.
void expect_state_is(ShardedDataParallel& zero, ShardedOptimizer& opt,
                     const checkpoint::CheckpointSource& src, const std::string& what) {
  zero.summon_full_params();
  for (const auto& [name, p] : zero.module().named_parameters())
    if (!equal(p, src.read_tensor("model/" + name)))
      throw Error(fmt::format("{}: parameter {} differs from the checkpoint", what, name));
  for (const auto& [key, t] : opt.full_state_dict())
    if (!equal(t, src.read_tensor("optimizer/" + key)))
      throw Error(fmt::format("{}: optimizer state {} differs from the checkpoint", what, key));
}

class ZeroCheckpoint : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("cohort_zckpt_{}", ::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& p) const { return (dir_ / p).string(); }
  fs::path dir_;
};

TEST_F(ZeroCheckpoint, ResumesAtTwoOneAndFourRanksWithTheUninterruptedLoss) {
  const std::string r4 = path("w4"), r2 = path("w2"), r1 = path("w1");
  // 4 ranks, stage 3: 3 steps, then a sharded checkpoint of 4 files.
  spawn([&](int) { zero_run(3, "", 0, 3, r4); }, 4);
  const std::string at3 = r4 + "/step-00000003";
  ASSERT_EQ(checkpoint::open_checkpoint(at3)->world_size(), 4);
  // 2 ranks, stage 1, and 1 rank, stage 2: the next steps' losses match.
  spawn([&](int) { zero_run(1, at3, 3, 5, r2); }, 2);
  spawn([&](int) { zero_run(2, at3, 3, 4, r1); }, 1);
  // Back to 4 ranks (stage 2) from the 2-rank checkpoint, and from the 1-rank one.
  spawn([&](int) { zero_run(2, r2 + "/step-00000005", 5, 6, ""); }, 4);
  spawn([&](int) { zero_run(3, r1 + "/step-00000004", 4, 5, ""); }, 4);
}

TEST_F(ZeroCheckpoint, ShardsConvertToAWholeCheckpointThatLoadsInOneProcess) {
  spawn([&](int) { zero_run(3, "", 0, 2, path("w4")); }, 4);
  checkpoint::reshard_checkpoint(path("w4/step-00000002"), path("whole"), 0);
  auto model = make_gpt(5);
  auto opt = zero_testing::gpt_adamw(*model, [](const Tensor& t) { return t; });
  checkpoint::TrainingState st = checkpoint::load_checkpoint(path("whole"), *model, opt.get());
  EXPECT_EQ(st.step, 2);
  const Reference ref = train_reference(2);
  const nn::NamedTensors got = model->named_parameters();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(allclose(got[i].second, ref.params[i].second, 1e-3, 1e-5)) << got[i].first;
}

TEST_F(ZeroCheckpoint, AnotherModelIsRefusedNamingTheTensor) {
  spawn([&](int) { zero_run(2, "", 0, 1, path("w2")); }, 2);
  spawn(
      [&](int) {
        auto pg = distributed::init_process_group("native", "env://", -1, -1, 60s);
        Generator gen(1);
        auto mlp =
            nn::make_mlp(gen, {.in_features = 4, .width = 8, .hidden_layers = 1, .classes = 2});
        ShardedDataParallel zero(mlp, pg, {.stage = 3});
        ShardedOptimizer opt(
            zero, std::make_unique<optim::AdamW>(zero.shard_parameters(), optim::AdamWOptions{}));
        try {
          checkpoint::load_zero_checkpoint(*checkpoint::open_checkpoint(path("w2/step-00000001")),
                                           opt);
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("has no tensor 'model/") != std::string::npos) return;
          throw;
        }
        throw Error("a checkpoint of another model was loaded");
      },
      2);
}

// The format holds the world's chunks; HSDP ranks own chunks of their shard
// group's layout, so both directions are refused rather than mixed up.
TEST_F(ZeroCheckpoint, HybridShardingIsRefusedNamingTheWholeFormat) {
  spawn([&](int) { zero_run(2, "", 0, 1, path("h4")); }, 4);
  spawn(
      [&](int) {
        auto pg = distributed::init_process_group("native", "env://", -1, -1, 60s);
        auto gpt = make_gpt(1);
        ShardedDataParallel zero(gpt, pg, {.stage = 2, .hybrid_shard_size = 2});
        ShardedOptimizer opt(
            zero, zero_testing::gpt_adamw(*gpt, [&](const Tensor& t) { return zero.shard_of(t); }));
        int refused = 0;
        for (int save = 0; save < 2; ++save) {
          try {
            if (save == 1)
              checkpoint::save_zero_checkpoint(opt, path("h4b"), {});
            else
              checkpoint::load_zero_checkpoint(
                  *checkpoint::open_checkpoint(path("h4/step-00000001")), opt);
          } catch (const NotSupported& e) {
            if (std::string(e.what()).find("--checkpoint-format whole") != std::string::npos)
              ++refused;
          }
        }
        if (refused != 2) throw Error(fmt::format("{} of 2 HSDP checkpoint ops refused", refused));
        distributed::destroy_process_group(pg);
      },
      4);
}

TEST_F(ZeroCheckpoint, EmptyChunksAndFrozenParametersRoundTripBetweenFourAndThreeRanks) {
  const std::string root = path("odd");
  // stage: 3 at 4 ranks (frozen tensors saved from the segments), then 1 at 3 ranks.
  auto job = [&](int stage, bool save) {
    auto pg = distributed::init_process_group("native", "env://", -1, -1, 60s);
    Generator gen(10 + static_cast<uint64_t>(pg->rank()));
    auto model = std::make_shared<Odd>(gen);
    ShardedDataParallel zero(model, pg, {.stage = stage});
    ShardedOptimizer opt(zero, std::make_unique<optim::Adam>(zero.shard_parameters(),
                                                             optim::AdamOptions{.lr = 1e-2}));
    const std::string what = fmt::format("stage {} at {} ranks", stage, pg->size());
    if (save) {
      opt.zero_grad();
      Generator data(5);
      Tensor x = rand({4, 6}, data), y = rand({4, 1}, data);
      mse_loss(zero.forward(x), y).backward();
      opt.step();
      checkpoint::TrainingState st;
      st.step = 1;
      const std::string p = checkpoint::save_zero_checkpoint(opt, root, st);
      expect_state_is(zero, opt, *checkpoint::open_checkpoint(p), what + " (saved)");
    } else {
      auto src = checkpoint::open_checkpoint(root);
      checkpoint::load_zero_checkpoint(*src, opt);
      expect_state_is(zero, opt, *src, what + " (loaded)");
    }
    distributed::destroy_process_group(pg);
  };
  spawn([&](int) { job(3, true); }, 4);
  spawn([&](int) { job(1, false); }, 3);
  spawn([&](int) { job(3, false); }, 3);
}

TEST_F(ZeroCheckpoint, AFailedWriteOnOneRankFailsEveryRankAndLeavesNoCheckpoint) {
  const std::string root = path("failed");
  spawn(
      [&](int rank) {
        auto pg = distributed::init_process_group("native", "env://", -1, -1, 60s);
        // Rank 1's piece lies outside its 4-element tensor: its write fails.
        checkpoint::ShardPiece piece{"model/w", {4}, rank == 0 ? 0 : 3, Tensor::ones({2})};
        checkpoint::TrainingState st;
        st.step = 1;
        try {
          checkpoint::save_sharded_checkpoint(*pg, root, {piece}, st);
        } catch (const InvalidArgument& e) {
          if (rank == 1) return;  // its own error
          throw;
        } catch (const IoError& e) {
          if (rank == 0 && std::string(e.what()).find("rank 1 failed") != std::string::npos) return;
          throw;
        }
        throw Error("a failed write went unnoticed");
      },
      2);
  for (const auto& e : fs::directory_iterator(root))
    ADD_FAILURE() << "left behind: " << e.path().string();
}

}  // namespace
}  // namespace cohort::parallel
