// Background checkpoints: the same bytes as synchronous ones, whole and
// sharded (ZeRO ranks on threads); what training does after save() returns
// is not in the files; a crash while writing leaves the previous checkpoint;
// a failed write is reported at the next call, named. Writes are held in
// progress by the test hook, never by timing.
#include "cohort/checkpoint/async_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "cohort/autograd/ops.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/checkpoint/zero_checkpoint.h"
#include "cohort/core/random.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/adam.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Every file of a checkpoint directory, by name.
std::map<std::string, std::string> dir_bytes(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = file_bytes(e.path());
  return out;
}

bool has_step_dir(const fs::path& root, const std::string& name) { return fs::exists(root / name); }

class AsyncCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    // A death test's child (threadsafe style: this binary run again) works
    // in its parent's directory.
    const bool child = !GTEST_FLAG_GET(internal_run_death_test).empty();
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_async_ckpt_{}_{}", child ? ::getppid() : ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    if (child) return;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (GTEST_FLAG_GET(internal_run_death_test).empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// A Linear trained one Adam step (moments and step counts in its state).
struct Trained {
  Generator gen{5};
  nn::Linear model{6, 4, gen};
  optim::Adam opt{model.parameters(), {.lr = 0.01}};
  Trained() { step(); }
  void step() {
    opt.zero_grad();
    sum(model.forward(rand({3, 6}, gen))).backward();
    opt.step();
  }
};

TrainingState state_at(int64_t step) {
  TrainingState st;
  st.step = step;
  st.epoch = 1;
  st.sampler = {.epoch = 1, .position = 9};
  st.extra["k"] = "v";
  return st;
}

// A hook that holds the write at kStarted until released.
struct Gate {
  std::promise<void> reached, release;
  std::shared_future<void> released{release.get_future().share()};
  std::function<void(AsyncWritePhase, const std::string&)> hook() {
    return [this](AsyncWritePhase phase, const std::string&) {
      if (phase != AsyncWritePhase::kStarted) return;
      reached.set_value();
      released.wait();
    };
  }
};

TEST_F(AsyncCheckpointTest, WholeEqualsSynchronousAndLaterTrainingIsNotInIt) {
  Trained t;
  const std::string sync_path =
      save_checkpoint((dir_ / "sync").string(), t.model, &t.opt, state_at(3));
  Gate gate;
  AsyncCheckpointWriter writer({.test_hook = gate.hook()});
  const std::string path = writer.save((dir_ / "async").string(), t.model, &t.opt, state_at(3));
  EXPECT_EQ(path, (dir_ / "async" / "step-00000003").string());
  gate.reached.get_future().wait();  // the write has begun but written nothing
  // Training goes on before the background thread writes a byte.
  t.step();
  for (Tensor p : t.model.parameters()) p.detach().fill_(42.0);
  gate.release.set_value();
  EXPECT_EQ(writer.wait(), path);
  EXPECT_TRUE(dir_bytes(path) == dir_bytes(sync_path));
  EXPECT_EQ(dir_bytes(path).size(), 2u);
  EXPECT_EQ(latest_checkpoint((dir_ / "async").string()), path);
  EXPECT_GT(writer.last_stats().staged_bytes, 0u);
}

TEST_F(AsyncCheckpointTest, SecondSaveWaitsForTheFirstAndReusesItsBuffers) {
  Trained t;
  AsyncCheckpointWriter writer;
  const std::string root = (dir_ / "ck").string();
  writer.save(root, t.model, &t.opt, state_at(1));
  t.step();
  const std::string second = writer.save(root, t.model, &t.opt, state_at(2));
  EXPECT_EQ(writer.wait(), second);
  EXPECT_TRUE(has_step_dir(root, "step-00000001"));
  const std::string sync_path =
      save_checkpoint((dir_ / "sync").string(), t.model, &t.opt, state_at(2));
  EXPECT_TRUE(dir_bytes(second) == dir_bytes(sync_path));  // the reused buffers hold the new state
  EXPECT_EQ(writer.wait(), std::nullopt);                  // nothing in flight
}

TEST_F(AsyncCheckpointTest, WaitTimesOutWhileTheWriteIsHeldThenSucceeds) {
  Trained t;
  Gate gate;
  AsyncCheckpointWriter writer({.test_hook = gate.hook()});
  const std::string path = writer.save((dir_ / "ck").string(), t.model, &t.opt, state_at(4));
  gate.reached.get_future().wait();
  EXPECT_TRUE(writer.busy());
  EXPECT_THROW(writer.wait(std::chrono::milliseconds(0)), TimeoutError);
  gate.release.set_value();
  EXPECT_EQ(writer.wait(), path);
  EXPECT_FALSE(writer.busy());
}

TEST_F(AsyncCheckpointTest, WriteErrorIsReportedAtTheNextWaitAndSaveNamingThePath) {
  Trained t;
  const std::string root = (dir_ / "ck").string();
  int calls = 0;
  AsyncCheckpointWriter writer({.test_hook = [&](AsyncWritePhase phase, const std::string&) {
    if (phase == AsyncWritePhase::kFilesWritten && calls++ < 2)
      throw IoError("injected disk failure");
  }});
  writer.save(root, t.model, &t.opt, state_at(5));
  try {
    writer.wait();
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("step-00000005"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("injected disk failure"), std::string::npos) << e.what();
  }
  // The next save reports the failure of the one before it.
  writer.save(root, t.model, &t.opt, state_at(6));
  try {
    writer.save(root, t.model, &t.opt, state_at(7));
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("step-00000006"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(has_step_dir(root, "step-00000005"));
  EXPECT_FALSE(has_step_dir(root, "step-00000006"));
  EXPECT_EQ(latest_checkpoint(root), std::nullopt);
  // No temporary left behind by the failed writes.
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp.step")) << e.path();
}

TEST_F(AsyncCheckpointTest, RootThatBecameUnwritableIsReportedNamingIt) {
  Trained t;
  const fs::path root = dir_ / "gone";
  check_writable_dir(root.string());
  // After the check, the root stops being a directory one can write into
  // (a read-only directory would not stop a test run as root).
  fs::remove_all(root);
  std::ofstream(root) << "not a directory";
  AsyncCheckpointWriter writer;
  writer.save(root.string(), t.model, &t.opt, state_at(1));
  try {
    writer.wait();
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(root.string()), std::string::npos) << e.what();
  }
}

TEST_F(AsyncCheckpointTest, DestructorWaitsForTheWrite) {
  Trained t;
  const std::string root = (dir_ / "ck").string();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::string path;
  std::thread releaser;
  {
    AsyncCheckpointWriter writer({.test_hook = [&](AsyncWritePhase phase, const std::string&) {
      if (phase == AsyncWritePhase::kStarted) released.wait();
    }});
    path = writer.save(root, t.model, &t.opt, state_at(8));
    releaser = std::thread([&] { release.set_value(); });
  }  // waits for the held write
  releaser.join();
  EXPECT_EQ(latest_checkpoint(root), path);
}

// The child process dies (as if killed) in the middle of the background write.
TEST_F(AsyncCheckpointTest, CrashWhileWritingLeavesThePreviousCheckpoint) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string root = (dir_ / "ck").string();
  for (AsyncWritePhase when : {AsyncWritePhase::kStarted, AsyncWritePhase::kFilesWritten}) {
    EXPECT_EXIT(
        {
          Trained t;
          save_checkpoint(root, t.model, &t.opt, state_at(1));
          AsyncCheckpointWriter writer(
              {.test_hook = [&](AsyncWritePhase phase, const std::string&) {
                if (phase == when) ::_exit(7);
              }});
          writer.save(root, t.model, &t.opt, state_at(2));
          writer.wait();
          ::_exit(0);
        },
        testing::ExitedWithCode(7), "");
    EXPECT_EQ(latest_checkpoint(root), (fs::path(root) / "step-00000001").string());
    EXPECT_FALSE(has_step_dir(root, "step-00000002"));
  }
  // The dead writer's temporaries go at the next write.
  Trained t;
  AsyncCheckpointWriter writer;
  writer.save(root, t.model, &t.opt, state_at(3));
  writer.wait();
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp.")) << e.path();
}

// ---- sharded (ZeRO), two ranks on threads ----

struct ZeroRun {
  std::shared_ptr<nn::ToyModel> model;
  std::unique_ptr<parallel::ShardedDataParallel> zero;
  std::unique_ptr<parallel::ShardedOptimizer> opt;
  ZeroRun(std::shared_ptr<distributed::ProcessGroup> pg, int stage) {
    Generator gen(11);
    model = std::make_shared<nn::ToyModel>(gen);
    zero = std::make_unique<parallel::ShardedDataParallel>(model, pg,
                                                           parallel::ZeroOptions{.stage = stage});
    opt = std::make_unique<parallel::ShardedOptimizer>(
        *zero, std::make_unique<optim::Adam>(zero->shard_parameters(), optim::AdamOptions{}));
  }
  void train(int rank, int steps) {
    for (int s = 0; s < steps; ++s) {
      Generator gen(70 + static_cast<uint64_t>(s * 2 + rank));
      Tensor x = randn({4, 10}, gen);
      Tensor y = randn({4, 5}, gen);
      opt->zero_grad();
      zero->forward_with([&](nn::Module& m) { return mse_loss(m(x), y); }).backward();
      opt->step();
    }
  }
};

void run_ranks(const std::string& name, int n,
               const std::function<void(std::shared_ptr<distributed::ProcessGroup>)>& fn) {
  distributed::testing::run_ranks_named(fmt::format("{}-{}", name, ::getpid()), n, fn);
}

TEST_F(AsyncCheckpointTest, ShardedZeroEqualsSynchronousAndLaterTrainingIsNotInIt) {
  for (int stage : {2, 3}) {
    const fs::path sync_root = dir_ / fmt::format("sync{}", stage);
    const fs::path async_root = dir_ / fmt::format("async{}", stage);
    run_ranks(fmt::format("async-zero{}", stage), 2, [&](auto pg) {
      ZeroRun run(pg, stage);
      run.train(pg->rank(), 2);
      save_zero_checkpoint(*run.opt, sync_root.string(), state_at(2));
      Gate gate;
      AsyncCheckpointWriter writer({.test_hook = gate.hook()});
      // What save_zero_checkpoint adds to the metadata.
      const Metadata info{{"cohort.sharded.zero_stage", std::to_string(stage)}};
      const std::string path = writer.save_sharded(
          *pg, async_root.string(), zero_checkpoint_pieces(*run.opt), state_at(2), info);
      gate.reached.get_future().wait();
      run.train(pg->rank(), 1);  // collectives on the group while the write is held
      gate.release.set_value();
      EXPECT_EQ(writer.wait(*pg), path);
    });
    const auto want = dir_bytes(sync_root / "step-00000002");
    const auto have = dir_bytes(async_root / "step-00000002");
    EXPECT_EQ(want.size(), 3u);
    for (const auto& [file, bytes] : want) {
      auto it = have.find(file);
      EXPECT_TRUE(it != have.end() && it->second == bytes) << file << ", stage " << stage;
    }
    EXPECT_EQ(have.size(), want.size());
    EXPECT_EQ(latest_checkpoint(async_root.string()), (async_root / "step-00000002").string());
  }
}

TEST_F(AsyncCheckpointTest, ShardedWriteErrorOnOneRankFailsEveryRankNamingIt) {
  const fs::path root = dir_ / "ck";
  std::vector<std::string> messages(2);
  run_ranks("async-zero-err", 2, [&](auto pg) {
    ZeroRun run(pg, 2);
    run.train(pg->rank(), 1);
    const int rank = pg->rank();
    AsyncCheckpointWriter writer({.test_hook = [rank](AsyncWritePhase phase, const std::string&) {
      if (rank == 1 && phase == AsyncWritePhase::kStarted) throw IoError("injected on rank 1");
    }});
    writer.save_sharded(*pg, root.string(), zero_checkpoint_pieces(*run.opt), state_at(1));
    try {
      writer.wait(*pg);
    } catch (const IoError& e) {
      messages[static_cast<size_t>(rank)] = e.what();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("injected on rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  }
  EXPECT_NE(messages[1].find("step-00000001"), std::string::npos) << messages[1];
  EXPECT_EQ(latest_checkpoint(root.string()), std::nullopt);
  EXPECT_FALSE(has_step_dir(root, "step-00000001"));
}

TEST_F(AsyncCheckpointTest, ShardedCrashBeforeTheCommitLeavesThePreviousCheckpoint) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path root = dir_ / "ck";
  EXPECT_EXIT(
      {
        run_ranks("async-zero-crash", 2, [&](auto pg) {
          ZeroRun run(pg, 2);
          run.train(pg->rank(), 1);
          save_zero_checkpoint(*run.opt, root.string(), state_at(1));
          const int rank = pg->rank();
          AsyncCheckpointWriter writer(
              {.test_hook = [rank](AsyncWritePhase phase, const std::string&) {
                if (rank == 0 && phase == AsyncWritePhase::kFilesWritten) ::_exit(9);
              }});
          writer.save_sharded(*pg, root.string(), zero_checkpoint_pieces(*run.opt), state_at(2));
          writer.wait(*pg);
        });
        ::_exit(0);
      },
      testing::ExitedWithCode(9), "");
  EXPECT_EQ(latest_checkpoint(root.string()), (root / "step-00000001").string());
  EXPECT_FALSE(has_step_dir(root, "step-00000002"));
}

}  // namespace
}  // namespace cohort::checkpoint
