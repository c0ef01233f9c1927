// `cohort train --strategy pipeline | tensor` end to end: the real binary
// under `cohort run`, checked against a single-process run of the same
// global batch and seed. On the baseline kernels (COHORT_KERNELS=baseline)
// the only difference between the runs is the order of floating-point sums
// (micro-batches, split matmuls), so the checkpoints agree to float32
// tolerance; checkpoints of every strategy hold the whole model under
// single-process names and load into the others.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::vector<std::string> kBaseline = {"COHORT_KERNELS=baseline"};

// A single-process run of `steps` steps with `batch` examples per step.
std::string single_run(const std::string& tag, const std::string& model, int64_t batch, int steps) {
  std::string dir = make_temp_dir(tag);
  Finished f = run_command(
      train_argv({"--model", model, "--batch-size", std::to_string(batch), "--max-steps",
                  std::to_string(steps), "--checkpoint-dir", dir, "--strategy", "single"}),
      kBaseline);
  EXPECT_EQ(f.exit_code, 0) << f.output;
  return step_dir(dir, steps);
}

class PipelineSchedules : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineSchedules, TwoStagesMatchOneProcess) {
  const std::string reference = single_run("pp_single", "net", 64, 3);
  std::string dir = make_temp_dir("pp_" + GetParam());
  Finished f = run_command(
      run_argv(2, {},
               {"--strategy", "pipeline", "--pipeline-schedule", GetParam(), "--micro-batches", "4",
                "--batch-size", "64", "--max-steps", "3", "--checkpoint-dir", dir}),
      kBaseline);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("pipeline " + GetParam()), std::string::npos) << f.output;
  expect_close_checkpoints(reference, step_dir(dir, 3));
}

INSTANTIATE_TEST_SUITE_P(TrainModelParallel, PipelineSchedules,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(TrainModelParallel, PipelineTimesDataParallelMatchesOneProcess) {
  // 4 ranks = 2 stages x 2 replicas of batch 32: one process with batch 64.
  const std::string reference = single_run("ppdp_single", "mlp", 64, 2);
  std::string dir = make_temp_dir("ppdp");
  Finished f =
      run_command(run_argv(4, {},
                           {"--model", "mlp", "--strategy", "pipeline", "--pipeline-stages", "2",
                            "--micro-batches", "2", "--batch-size", "32", "--max-steps", "2",
                            "--checkpoint-dir", dir}),
                  kBaseline);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  expect_close_checkpoints(reference, step_dir(dir, 2));
}

TEST(TrainModelParallel, TensorParallelMatchesOneProcess) {
  const std::string reference = single_run("tp_single", "net", 64, 3);
  std::string dir = make_temp_dir("tp");
  Finished f = run_command(run_argv(2, {},
                                    {"--strategy", "tensor", "--batch-size", "64", "--max-steps",
                                     "3", "--checkpoint-dir", dir}),
                           kBaseline);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("tensor parallel"), std::string::npos) << f.output;
  expect_close_checkpoints(reference, step_dir(dir, 3));
}

TEST(TrainModelParallel, CheckpointsMoveBetweenModelParallelAndSingleProcessRuns) {
  // pipeline -> single, single -> tensor, tensor -> pipeline: each resumed
  // run continues the straight single-process run.
  const std::string straight = single_run("mv_straight", "net", 64, 6);
  std::string pp = make_temp_dir("mv_pp");
  Finished a = run_command(run_argv(2, {},
                                    {"--strategy", "pipeline", "--micro-batches", "2",
                                     "--max-steps", "2", "--checkpoint-dir", pp}),
                           kBaseline);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  std::string single = make_temp_dir("mv_single");
  Finished b = run_command(train_argv({"--strategy", "single", "--max-steps", "3",
                                       "--checkpoint-dir", single, "--resume", step_dir(pp, 2)}),
                           kBaseline);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  std::string tp = make_temp_dir("mv_tp");
  Finished c = run_command(run_argv(2, {},
                                    {"--strategy", "tensor", "--max-steps", "4", "--checkpoint-dir",
                                     tp, "--resume", step_dir(single, 3)}),
                           kBaseline);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  std::string pp2 = make_temp_dir("mv_pp2");
  Finished d = run_command(
      run_argv(2, {},
               {"--strategy", "pipeline", "--pipeline-schedule", "gpipe", "--micro-batches", "2",
                "--max-steps", "6", "--checkpoint-dir", pp2, "--resume", step_dir(tp, 4)}),
      kBaseline);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("resumed from " + step_dir(tp, 4) + " at step 4"), std::string::npos)
      << d.output;
  expect_close_checkpoints(straight, step_dir(pp2, 6));
}

// The pipeline's default of 4 micro-batches adapts to a smaller batch; an
// explicit count larger than the batch stays an error (issue 34).
TEST(TrainModelParallel, PipelineDefaultMicroBatchesFitASmallBatch) {
  Finished f = run_command(
      run_argv(2, {}, {"--strategy", "pipeline", "--batch-size", "3", "--max-steps", "2"}),
      kBaseline);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("3 micro-batches"), std::string::npos) << f.output;
  Finished g = run_command(
      train_argv({"--strategy", "pipeline", "--batch-size", "2", "--micro-batches", "4"}));
  EXPECT_EQ(g.exit_code, 2) << g.output;
  EXPECT_NE(g.output.find("--micro-batches must be in [1, --batch-size = 2], got 4"),
            std::string::npos)
      << g.output;
}

TEST(TrainModelParallel, BadPipelineSettingsAreRejected) {
  Finished f = run_command(train_argv({"--strategy", "pipeline", "--micro-batches", "0"}));
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("--micro-batches"), std::string::npos) << f.output;
  // Three stages do not divide a world of two.
  Finished g = run_command(run_argv(2, {}, {"--strategy", "pipeline", "--pipeline-stages", "3"}));
  EXPECT_NE(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("--pipeline-stages"), std::string::npos) << g.output;
}

}  // namespace
}  // namespace cohort::test
