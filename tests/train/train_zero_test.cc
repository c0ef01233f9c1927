// `cohort train --strategy zero`: every ZeRO stage writes the checkpoint DDP
// writes (parameters and the optimizer state gathered from the shards, to
// float32 tolerance), and a stage 3 checkpoint resumes under stage 1 and
// under DDP to the same final state as an uninterrupted run; HSDP
// (--zero-shard-size) writes DDP's checkpoint too.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

std::vector<std::string> zero_args(int stage, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--strategy", "zero", "--zero-stage", std::to_string(stage)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(TrainZero, EveryStageWritesDdpsCheckpoint) {
  const std::string ddp = make_temp_dir("zero-ddp");
  Finished f = run_command(run_argv(2, {}, {"--max-steps", "4", "--checkpoint-dir", ddp}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  for (int stage : {1, 2, 3}) {
    const std::string dir = make_temp_dir("zero-" + std::to_string(stage));
    Finished z = run_command(
        run_argv(2, {}, zero_args(stage, {"--max-steps", "4", "--checkpoint-dir", dir})));
    ASSERT_EQ(z.exit_code, 0) << z.output;
    EXPECT_NE(z.output.find("ZeRO stage " + std::to_string(stage)), std::string::npos) << z.output;
    expect_close_checkpoints(step_dir(ddp, 4), step_dir(dir, 4));
  }
}

TEST(TrainZero, Stage3CheckpointResumesUnderStage1AndDdp) {
  const std::string straight = make_temp_dir("zero-straight");
  Finished f = run_command(
      run_argv(2, {}, zero_args(3, {"--max-steps", "4", "--checkpoint-dir", straight})));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const std::string first = make_temp_dir("zero-first");
  Finished a =
      run_command(run_argv(2, {}, zero_args(3, {"--max-steps", "2", "--checkpoint-dir", first})));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  for (const std::string& how : {"zero1", "ddp"}) {
    const std::string dir = make_temp_dir("zero-resume-" + how);
    std::filesystem::copy(step_dir(first, 2), step_dir(dir, 2),
                          std::filesystem::copy_options::recursive);
    std::vector<std::string> rest = {"--max-steps", "4",        "--checkpoint-dir",
                                     dir,           "--resume", "auto"};
    Finished b = run_command(run_argv(2, {}, how == "ddp" ? rest : zero_args(1, rest)));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("resumed from " + step_dir(dir, 2)), std::string::npos) << b.output;
    expect_close_checkpoints(step_dir(straight, 4), step_dir(dir, 4));
  }
}

// --zero-shard-size 2 at 4 ranks (HSDP: two shard groups of 2, replicated)
// writes DDP's checkpoint; --grad-reduce bf16 is taken by --strategy zero.
TEST(TrainZero, HybridShardingAtFourRanksWritesDdpsCheckpointAndBf16ReduceRuns) {
  const std::string ddp = make_temp_dir("hsdp-ddp");
  Finished f = run_command(run_argv(4, {}, {"--max-steps", "2", "--checkpoint-dir", ddp}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const std::string dir = make_temp_dir("hsdp-zero");
  Finished z = run_command(run_argv(
      4, {},
      zero_args(2, {"--zero-shard-size", "2", "--max-steps", "2", "--checkpoint-dir", dir})));
  ASSERT_EQ(z.exit_code, 0) << z.output;
  EXPECT_NE(z.output.find("HSDP: sharded over 2 ranks x 2 replicas"), std::string::npos)
      << z.output;
  expect_close_checkpoints(step_dir(ddp, 2), step_dir(dir, 2));
  Finished h =
      run_command(run_argv(2, {}, zero_args(1, {"--grad-reduce", "bf16", "--max-steps", "2"})));
  ASSERT_EQ(h.exit_code, 0) << h.output;
  EXPECT_NE(h.output.find("bf16 gradient reduction"), std::string::npos) << h.output;
}

}  // namespace
}  // namespace cohort::test
