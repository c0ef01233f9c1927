// `cohort train --comm-hook`: PowerSGD and its batched form under DDP and
// fp16 compression under ZeRO stage 3, under `cohort run`, and the
// combinations the options refuse.
#include <gtest/gtest.h>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

TEST(TrainCommHook, PowerSGDRankTwoTrainsUnderCohortRun) {
  Finished f =
      run_command(run_argv(2, {},
                           {"--strategy", "ddp", "--comm-hook", "powersgd:2",
                            "--powersgd-start-iter", "2", "--max-steps", "4", "--log-every", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("comm hook powersgd:2 from step 2"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("step 4/4"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("nan"), std::string::npos) << f.output;
}

TEST(TrainCommHook, BatchedPowerSGDTrainsUnderCohortRun) {
  Finished f =
      run_command(run_argv(2, {},
                           {"--strategy", "ddp", "--comm-hook", "batched_powersgd:2",
                            "--powersgd-start-iter", "2", "--max-steps", "3", "--log-every", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("comm hook batched_powersgd:2 from step 2"), std::string::npos)
      << f.output;
  EXPECT_NE(f.output.find("step 3/4"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("nan"), std::string::npos) << f.output;
}

TEST(TrainCommHook, ZeroStageThreeTrainsWithFp16CompressionUnderCohortRun) {
  Finished f = run_command(run_argv(2, {},
                                    {"--strategy", "zero", "--zero-stage", "3", "--comm-hook",
                                     "fp16", "--max-steps", "3", "--log-every", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("comm hook fp16"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("step 3/4"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("nan"), std::string::npos) << f.output;
}

TEST(TrainCommHook, ConflictingOrBadChoicesAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--comm-hook", "powersgd:2", "--grad-reduce", "bf16"},
       "--comm-hook powersgd:2 and --grad-reduce bf16 both say"},
      {{"--comm-hook", "fp16", "--strategy", "pipeline"},
       "--comm-hook applies to DDP (--strategy ddp or auto) and ZeRO"},
      {{"--comm-hook", "powersgd:2", "--strategy", "zero"},
       "--comm-hook powersgd:2 applies to DDP: PowerSGD compresses"},
      {{"--comm-hook", "fp16", "--strategy", "zero", "--zero-shard-size", "1"},
       "(HSDP) is not supported, as FSDP's hybrid strategies"},
      {{"--comm-hook", "powersgd:0"}, "--comm-hook must be allreduce, fp16, bf16, powersgd"},
      {{"--comm-hook", "topk"}, "--comm-hook must be allreduce, fp16, bf16, powersgd"},
      {{"--comm-hook", "powersgd", "--powersgd-start-iter", "1"},
       "--powersgd-start-iter must be > 1"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> argv = train_argv(extra);
    argv.insert(argv.end(), {"--max-steps", "1"});
    Finished f = run_command(argv);
    EXPECT_NE(f.exit_code, 0) << extra[1] << ": " << f.output;
    EXPECT_NE(f.output.find(message), std::string::npos) << extra[1] << ": " << f.output;
    EXPECT_EQ(f.output.find("step 1/"), std::string::npos) << f.output;
  }
  // --grad-reduce bf16 is --comm-hook bf16: the two agree.
  std::vector<std::string> argv = train_argv({"--comm-hook", "bf16", "--grad-reduce", "bf16"});
  argv.insert(argv.end(), {"--max-steps", "1"});
  Finished ok = run_command(argv);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

}  // namespace
}  // namespace cohort::test
