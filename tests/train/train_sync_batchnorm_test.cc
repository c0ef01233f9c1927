// `cohort train --model net-bn --sync-batchnorm` end to end: two DDP ranks
// whose BatchNorm layers take the statistics of the whole global batch end
// where one process on that batch ends (parameters, optimizer state and the
// BatchNorm buffers), which plain BatchNorm under DDP does not (each rank
// normalises by its own half and rank 0's buffers win); strategies the flag
// does not apply to are refused. Baseline kernels, as the other
// comparisons with one process (train_model_parallel_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::vector<std::string> kBaseline = {"COHORT_KERNELS=baseline"};
constexpr int kSteps = 3;

std::vector<std::string> net_bn_argv(std::vector<std::string> extra) {
  return train_argv_of(kCohort, "net-bn", std::move(extra));
}

std::vector<std::string> ddp_argv(std::vector<std::string> extra) {
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "2"};
  for (const std::string& a : net_bn_argv(std::move(extra))) argv.push_back(a);
  return argv;
}

TEST(TrainSyncBatchnorm, DdpOfTwoRanksMatchesOneProcessWithTheirGlobalBatch) {
  const std::string dir = make_temp_dir("train_sbn");
  const std::string steps = std::to_string(kSteps);
  Finished one = run_command(net_bn_argv({"--strategy", "single", "--batch-size", "16",
                                          "--max-steps", steps, "--checkpoint-dir", dir + "/one"}),
                             kBaseline);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  Finished synced =
      run_command(ddp_argv({"--strategy", "ddp", "--sync-batchnorm", "--batch-size", "8",
                            "--max-steps", steps, "--checkpoint-dir", dir + "/synced"}),
                  kBaseline);
  ASSERT_EQ(synced.exit_code, 0) << synced.output;
  EXPECT_NE(synced.output.find("DDP, 2 ranks x 1 threads, SyncBatchNorm"), std::string::npos)
      << synced.output;
  expect_close_checkpoints(step_dir(dir + "/one", kSteps), step_dir(dir + "/synced", kSteps));

  // Without the flag the running statistics are rank 0's half's alone.
  Finished plain = run_command(ddp_argv({"--strategy", "ddp", "--batch-size", "8", "--max-steps",
                                         steps, "--checkpoint-dir", dir + "/plain"}),
                               kBaseline);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto want =
      checkpoint::load_safetensors(step_dir(dir + "/one", kSteps) + "/" + checkpoint::kModelFile)
          .tensors;
  auto got =
      checkpoint::load_safetensors(step_dir(dir + "/plain", kSteps) + "/" + checkpoint::kModelFile)
          .tensors;
  EXPECT_FALSE(allclose(got.at("bn1.running_var"), want.at("bn1.running_var"), 1e-4, 1e-5));
}

TEST(TrainSyncBatchnorm, RefusedWhereItDoesNotApply) {
  struct Refusal {
    std::vector<std::string> flags;
    std::string message;
  };
  for (const Refusal& r : std::vector<Refusal>{
           {{"--strategy", "dp"}, "--sync-batchnorm applies to --strategy ddp"},
           {{"--model", "net", "--strategy", "zero"}, "--sync-batchnorm applies to --strategy ddp"},
           {{"--strategy", "single"}, "--sync-batchnorm applies to --strategy ddp"},
           {{"--model", "net"}, "--model net has none (use --model net-bn)"}}) {
    std::vector<std::string> argv = net_bn_argv(r.flags);
    argv.insert(argv.end(), {"--sync-batchnorm", "--max-steps", "1"});
    Finished f = run_command(argv);
    EXPECT_EQ(f.exit_code, 2) << r.flags[1] << ": " << f.output;
    EXPECT_NE(f.output.find(r.message), std::string::npos) << f.output;
    EXPECT_EQ(f.output.find("epoch 1"), std::string::npos) << f.output;
  }
  Finished tensor = run_command(net_bn_argv({"--strategy", "tensor", "--max-steps", "1"}));
  EXPECT_EQ(tensor.exit_code, 2) << tensor.output;
  EXPECT_NE(tensor.output.find("--model net-bn trains under the strategies that hold the whole "
                               "model"),
            std::string::npos)
      << tensor.output;
  // One process under auto: a group of one is BatchNorm; the flag is ignored
  // with a warning.
  Finished alone = run_command(net_bn_argv({"--sync-batchnorm", "--max-steps", "1"}));
  EXPECT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_NE(alone.output.find("warning: --sync-batchnorm applies to --strategy ddp"),
            std::string::npos)
      << alone.output;
}

}  // namespace
}  // namespace cohort::test
