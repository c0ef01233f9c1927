// `cohort train --drop-last`: with false nothing is dropped or repeated, so
// two ranks hold different numbers of batches (129 examples: 65 and 64,
// batch 64: 2 and 1 batches) and DDP trains them under a Join (without it
// the job stops at the first collective rank 1 does not make), and so does
// ZeRO at stages 2 and 3; true drops the
// uneven tail; the strategies and options that cannot train uneven inputs
// are refused before training, naming why.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

std::vector<std::string> uneven_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {
      "--synthetic-train-size", "129", "--epochs", "2", "--log-every", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(TrainUnevenInputs, DropLastFalseTrainsRanksWithDifferentBatchCountsUnderAJoin) {
  const std::string dir = make_temp_dir("uneven");
  Finished f =
      run_command(run_argv(2, {}, uneven_args({"--drop-last", "false", "--checkpoint-dir", dir})));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("epoch 2"), std::string::npos) << f.output;
  // Both epochs count the longest rank's 2 steps.
  EXPECT_TRUE(std::filesystem::exists(step_dir(dir, 4))) << f.output;
}

TEST(TrainUnevenInputs, DropLastTrueDropsTheUnevenTail) {
  const std::string dir = make_temp_dir("drop-last");
  Finished f =
      run_command(run_argv(2, {}, uneven_args({"--drop-last", "true", "--checkpoint-dir", dir})));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  // 64 examples per rank, one full batch each per epoch.
  EXPECT_TRUE(std::filesystem::exists(step_dir(dir, 2))) << f.output;
  EXPECT_FALSE(std::filesystem::exists(step_dir(dir, 4))) << f.output;
}

TEST(TrainUnevenInputs, ZeroStagesTwoAndThreeTrainUnevenInputs) {
  for (const char* stage : {"2", "3"}) {
    const std::string dir = make_temp_dir(std::string("uneven-zero") + stage);
    Finished f =
        run_command(run_argv(2, {},
                             uneven_args({"--strategy", "zero", "--zero-stage", stage,
                                          "--drop-last", "false", "--checkpoint-dir", dir})));
    ASSERT_EQ(f.exit_code, 0) << "stage " << stage << ": " << f.output;
    EXPECT_TRUE(std::filesystem::exists(step_dir(dir, 4))) << "stage " << stage << ": " << f.output;
  }
}

TEST(TrainUnevenInputs, StrategiesThatCannotTrainUnevenInputsAreRefused) {
  Finished z = run_command(train_argv({"--drop-last", "false", "--strategy", "pipeline"}));
  EXPECT_NE(z.exit_code, 0);
  EXPECT_NE(z.output.find("--drop-last false leaves ranks with different numbers of batches"),
            std::string::npos)
      << z.output;
  const std::string dir = make_temp_dir("uneven-every");
  Finished c = run_command(
      train_argv({"--drop-last", "false", "--checkpoint-dir", dir, "--checkpoint-every", "2"}));
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.output.find("--checkpoint-every 0"), std::string::npos) << c.output;
}

}  // namespace
}  // namespace cohort::test
