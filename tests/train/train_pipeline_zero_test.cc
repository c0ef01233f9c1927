// `cohort train --strategy pipeline --zero-stage 1|2`: ZeRO over each
// stage's replicas (4 ranks: 2 stages x 2 replicas) writes the plain
// pipeline's checkpoint (parameters, and the optimizer state gathered from
// the shards over the replicas and the stages, to float32 tolerance); a
// stage 2 checkpoint resumes under stage 1 to the uninterrupted run's state;
// stage 3, auto and a grid of one replica are named errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

std::vector<std::string> pipeline_args(const std::string& zero, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--strategy", "pipeline", "--pipeline-stages", "2"};
  if (!zero.empty()) a.insert(a.end(), {"--zero-stage", zero});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(TrainPipelineZero, Stages1And2WriteThePlainPipelinesCheckpoint) {
  const std::string plain = make_temp_dir("pzero-plain");
  Finished f = run_command(
      run_argv(4, {}, pipeline_args("", {"--max-steps", "4", "--checkpoint-dir", plain})));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  for (const std::string stage : {"1", "2"}) {
    const std::string dir = make_temp_dir("pzero-" + stage);
    Finished z = run_command(
        run_argv(4, {}, pipeline_args(stage, {"--max-steps", "4", "--checkpoint-dir", dir})));
    ASSERT_EQ(z.exit_code, 0) << z.output;
    EXPECT_NE(z.output.find("ZeRO stage " + stage + " over each stage's replicas"),
              std::string::npos)
        << z.output;
    expect_close_checkpoints(step_dir(plain, 4), step_dir(dir, 4));
  }
}

TEST(TrainPipelineZero, Stage2CheckpointResumesUnderStage1) {
  const std::string straight = make_temp_dir("pzero-straight");
  Finished f = run_command(
      run_argv(4, {}, pipeline_args("2", {"--max-steps", "4", "--checkpoint-dir", straight})));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  const std::string first = make_temp_dir("pzero-first");
  Finished a = run_command(
      run_argv(4, {}, pipeline_args("2", {"--max-steps", "2", "--checkpoint-dir", first})));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string dir = make_temp_dir("pzero-resume");
  std::filesystem::copy(step_dir(first, 2), step_dir(dir, 2),
                        std::filesystem::copy_options::recursive);
  Finished b = run_command(run_argv(
      4, {},
      pipeline_args("1", {"--max-steps", "4", "--checkpoint-dir", dir, "--resume", "auto"})));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from " + step_dir(dir, 2)), std::string::npos) << b.output;
  expect_close_checkpoints(step_dir(straight, 4), step_dir(dir, 4));
}

TEST(TrainPipelineZero, UnsupportedCombinationsAreNamed) {
  Finished s3 = run_command(run_argv(4, {}, pipeline_args("3", {"--max-steps", "1"})));
  EXPECT_NE(s3.exit_code, 0);
  EXPECT_NE(s3.output.find("--strategy pipeline --zero-stage must be 1"), std::string::npos)
      << s3.output;
  // 2 ranks in 2 stages: one replica, nothing to shard over.
  Finished one = run_command(run_argv(2, {}, pipeline_args("1", {"--max-steps", "1"})));
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("leave one replica"), std::string::npos) << one.output;
}

}  // namespace
}  // namespace cohort::test
