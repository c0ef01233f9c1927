// Checkpoint and resume: a run stopped and resumed ends with the same
// parameters and optimizer state as one that ran straight through, in one
// process and under `cohort run --nproc-per-node 2`; checkpoints move
// between distributed and single-process runs.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

// 12 steps over two epochs (8 steps each in one process): the stop at step 5
// is mid-epoch and the resumed run crosses the epoch boundary.
const std::vector<std::string> kTwelve = {"--epochs", "2", "--max-steps", "12"};

TEST(TrainResume, SingleProcessResumeMatchesUninterruptedRun) {
  std::string straight = make_temp_dir("straight1");
  std::string resumed = make_temp_dir("resumed1");
  auto a = kTwelve;
  a.insert(a.end(), {"--checkpoint-dir", straight});
  Finished f = run_command(train_argv(a));
  ASSERT_EQ(f.exit_code, 0) << f.output;

  Finished first = run_command(train_argv({"--epochs", "2", "--max-steps", "5", "--checkpoint-dir",
                                           resumed, "--checkpoint-every", "2"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(std::filesystem::exists(step_dir(resumed, 4)));
  ASSERT_TRUE(std::filesystem::exists(step_dir(resumed, 5)));
  auto b = kTwelve;
  b.insert(b.end(), {"--checkpoint-dir", resumed, "--resume", "auto"});
  Finished second = run_command(train_argv(b));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from " + step_dir(resumed, 5)), std::string::npos)
      << second.output;
  expect_same_checkpoint(step_dir(straight, 12), step_dir(resumed, 12));
}

TEST(TrainResume, ResumeAutoWithoutCheckpointStartsFresh) {
  std::string dir = make_temp_dir("fresh");
  Finished f = run_command(train_argv({"--max-steps", "2", "--checkpoint-dir", dir, "--resume"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_EQ(f.output.find("resumed from"), std::string::npos) << f.output;
  EXPECT_TRUE(std::filesystem::exists(step_dir(dir, 2)));
}

TEST(TrainResume, ResumeFromMissingPathFails) {
  Finished f = run_command(train_argv({"--max-steps", "2", "--resume", "/nonexistent/step-1"}));
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find("/nonexistent/step-1"), std::string::npos) << f.output;
}

TEST(TrainResume, DistributedResumeMatchesUninterruptedRun) {
  // Two ranks: 4 steps per epoch; stop at step 3, resume to step 6 (epoch 2).
  std::string straight = make_temp_dir("straight2");
  std::string resumed = make_temp_dir("resumed2");
  Finished f = run_command(
      run_argv(2, {}, {"--epochs", "2", "--max-steps", "6", "--checkpoint-dir", straight}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("DDP, 2 ranks"), std::string::npos) << f.output;

  Finished first = run_command(
      run_argv(2, {}, {"--epochs", "2", "--max-steps", "3", "--checkpoint-dir", resumed}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  Finished second = run_command(run_argv(
      2, {},
      {"--epochs", "2", "--max-steps", "6", "--checkpoint-dir", resumed, "--resume", "auto"}));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from " + step_dir(resumed, 3)), std::string::npos)
      << second.output;
  expect_same_checkpoint(step_dir(straight, 6), step_dir(resumed, 6));
}

TEST(TrainResume, CheckpointsMoveBetweenDistributedAndSingleProcessRuns) {
  // Distributed -> single process.
  std::string dist = make_temp_dir("dist");
  Finished f = run_command(run_argv(2, {}, {"--max-steps", "2", "--checkpoint-dir", dist}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::string single_from_dist = make_temp_dir("single_from_dist");
  Finished g = run_command(train_argv(
      {"--max-steps", "4", "--checkpoint-dir", single_from_dist, "--resume", step_dir(dist, 2)}));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("resumed from " + step_dir(dist, 2) + " at step 2"), std::string::npos)
      << g.output;
  EXPECT_TRUE(std::filesystem::exists(step_dir(single_from_dist, 4)));

  // Single process -> distributed.
  std::string single = make_temp_dir("single");
  Finished h = run_command(train_argv({"--max-steps", "3", "--checkpoint-dir", single}));
  ASSERT_EQ(h.exit_code, 0) << h.output;
  std::string dist_from_single = make_temp_dir("dist_from_single");
  Finished k = run_command(run_argv(
      2, {},
      {"--max-steps", "5", "--checkpoint-dir", dist_from_single, "--resume", step_dir(single, 3)}));
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("resumed from " + step_dir(single, 3) + " at step 3"), std::string::npos)
      << k.output;
  EXPECT_TRUE(std::filesystem::exists(step_dir(dist_from_single, 5)));

  // And the distributed checkpoint is a plain model file for inference.
  auto model = checkpoint::load_safetensors(step_dir(dist, 2) + "/" + checkpoint::kModelFile);
  EXPECT_TRUE(model.tensors.contains("conv1.weight"));
  EXPECT_FALSE(model.tensors.contains("module.conv1.weight"));
}

}  // namespace
}  // namespace cohort::test
