// Distributed checkpoints with ranks on threads of this process (native
// backend over one HashStore).
#include "cohort/checkpoint/distributed_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "cohort/core/random.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/sgd.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

void run_ranks(int n, const std::function<void(distributed::ProcessGroup&)>& fn) {
  distributed::testing::run_ranks_named(fmt::format("ckpt-{}-{}", ::getpid(), n), n,
                                        [&](auto pg) { fn(*pg); });
}

class DistributedCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_dckpt_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(DistributedCheckpointTest, RankZeroWritesEveryRankLoadsTheSame) {
  const std::string root = (dir_ / "ckpt").string();
  Generator g(3);
  nn::ToyModel reference(g);
  std::vector<std::string> paths(3), resumed(3);
  run_ranks(3, [&](distributed::ProcessGroup& pg) {
    // Every rank holds the same weights (as after DDP's broadcast).
    auto model = reference.clone_as<nn::ToyModel>();
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    check_writable_dir(pg, root);
    EXPECT_FALSE(resolve_resume(pg, "auto", root).has_value());
    paths[static_cast<size_t>(pg.rank())] =
        save_checkpoint(pg, root, *model, &opt, {.epoch = 2, .step = 30, .sampler = {2, 64}});
    // Right after the collective save, every rank sees the complete checkpoint.
    auto latest = resolve_resume(pg, "auto", root);
    ASSERT_TRUE(latest.has_value());
    resumed[static_cast<size_t>(pg.rank())] = *latest;
    Generator other(100 + static_cast<uint64_t>(pg.rank()));
    nn::ToyModel fresh(other);
    TrainingState st = load_checkpoint(*latest, fresh);
    EXPECT_EQ(st.step, 30);
    EXPECT_EQ(st.sampler, (data::SamplerState{2, 64}));
    EXPECT_TRUE(
        equal(fresh.state_dict().at("net2.weight"), reference.state_dict().at("net2.weight")));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(paths[static_cast<size_t>(r)], paths[0]);
    EXPECT_EQ(resumed[static_cast<size_t>(r)], paths[0]);
  }
  // Exactly one checkpoint directory: only rank 0 wrote.
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(root)) dirs += e.is_directory();
  EXPECT_EQ(dirs, 1);
  // And it loads in a single process.
  nn::ToyModel single(g);
  EXPECT_EQ(load_checkpoint(root, single).epoch, 2);
}

TEST_F(DistributedCheckpointTest, FailureOnRankZeroFailsEveryRank) {
  std::ofstream(dir_ / "file") << "x";
  const std::string bad = (dir_ / "file" / "ckpt").string();
  std::vector<std::string> messages(2);
  run_ranks(2, [&](distributed::ProcessGroup& pg) {
    Generator g(1);
    nn::ToyModel model(g);
    try {
      check_writable_dir(pg, bad);
      ADD_FAILURE() << "rank " << pg.rank() << ": no error";
    } catch (const IoError& e) {
      messages[static_cast<size_t>(pg.rank())] = e.what();
    }
    EXPECT_THROW(save_checkpoint(pg, bad, model, nullptr, {.step = 1}), IoError);
    EXPECT_THROW(resolve_resume(pg, (dir_ / "missing").string(), bad), IoError);
  });
  EXPECT_NE(messages[0].find(bad), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("rank 0 failed"), std::string::npos) << messages[1];
  EXPECT_NE(messages[1].find(bad), std::string::npos) << messages[1];
}

}  // namespace
}  // namespace cohort::checkpoint
