// `cohort train` input errors, NaN detection and the metrics file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

TEST(TrainCli, BadFlagsAreRejectedWithUsage) {
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"--epochs", "0"},
           {"--epochs", "abc"},
           {"--bogus"},
           {"--model", "resnet"},
           {"--optimizer", "lbfgs"},
           {"--batch-size", "-3"},
           {"--lr", "-1"},
           {"--checkpoint-every", "5"},  // without --checkpoint-dir
           {"--model", "toy", "--dataset", "fashion-mnist"}}) {
    std::vector<std::string> argv = {kCohort, "train"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Finished f = run_command(argv);
    EXPECT_NE(f.exit_code, 0) << extra[0];
    EXPECT_NE(f.output.find("Usage:"), std::string::npos) << extra[0] << ": " << f.output;
    EXPECT_EQ(f.output.find("epoch 1"), std::string::npos) << f.output;
  }
}

// A batch smaller than the pipeline's default micro-batch count trains under
// the strategies that do not cut batches (issue 34: it used to fail
// validation for every strategy).
TEST(TrainCli, SmallBatchesTrain) {
  for (const auto& extra :
       std::vector<std::vector<std::string>>{{"--batch-size", "2"},
                                             {"--batch-size", "3"},
                                             {"--strategy", "dp", "--batch-size", "2"}}) {
    std::vector<std::string> argv = train_argv(extra);
    argv.insert(argv.end(), {"--max-steps", "3", "--log-every", "1"});
    Finished f = run_command(argv);
    EXPECT_EQ(f.exit_code, 0) << extra.back() << ": " << f.output;
    EXPECT_NE(f.output.find("step 3/"), std::string::npos) << f.output;
    EXPECT_EQ(f.output.find("--micro-batches"), std::string::npos) << f.output;
  }
}

// A flag given to a strategy that ignores it is trained through with a
// warning naming the flag and the strategies that read it.
TEST(TrainCli, FlagIgnoredByTheStrategyWarns) {
  Finished f = run_command(train_argv(
      {"--strategy", "single", "--micro-batches", "2", "--replicas", "3", "--max-steps", "1"}));
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("warning: --micro-batches applies to --strategy pipeline; --strategy "
                          "single ignores it"),
            std::string::npos)
      << f.output;
  EXPECT_NE(f.output.find("warning: --replicas applies to --strategy dp"), std::string::npos)
      << f.output;
  // Flags left at their defaults, or read by the strategy, draw no warning.
  Finished g = run_command(train_argv({"--strategy", "dp", "--replicas", "2", "--max-steps", "1"}));
  EXPECT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.find("warning:"), std::string::npos) << g.output;
}

TEST(TrainCli, MissingDataDirNamesPathAndPackage) {
  Finished f =
      run_command({kCohort, "train", "--data-dir", "/nonexistent/fashion", "--max-steps", "1"});
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.output.find("/nonexistent/fashion"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("dataset-fashion-mnist"), std::string::npos) << f.output;
}

TEST(TrainCli, UnwritableCheckpointDirFailsBeforeTraining) {
  // A path below a regular file cannot be created, even by root.
  std::string dir = make_temp_dir("unwritable");
  std::ofstream(dir + "/file") << "x";
  Finished f =
      run_command(train_argv({"--checkpoint-dir", dir + "/file/ckpt", "--max-steps", "2"}));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.output.find(dir + "/file/ckpt"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("step 1/"), std::string::npos) << "trained before failing:\n" << f.output;
}

TEST(TrainCli, NonFiniteLossStopsNamingTheStep) {
  Finished f = run_command(
      train_argv({"--lr", "1e12", "--momentum", "0", "--max-steps", "50", "--log-every", "1"}));
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find("loss is"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("at step"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("epoch 1:"), std::string::npos) << f.output;
}

TEST(TrainCli, MetricsFileHasOneJsonObjectPerStepAndPerEpoch) {
  std::string dir = make_temp_dir("metrics");
  std::string path = dir + "/metrics.jsonl";
  Finished f = run_command(train_argv({"--epochs", "3", "--metrics", path}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::istringstream lines(read_file(path));
  std::string line;
  int n = 0;
  int64_t steps = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("type") == "step") {
      // Steps count on across epochs, each with this step's loss.
      EXPECT_EQ(j.at("step").get<int64_t>(), ++steps) << line;
      EXPECT_EQ(j.at("epoch").get<int>(), n + 1) << line;
      EXPECT_TRUE(j.at("loss").is_number()) << line;
      continue;
    }
    ASSERT_EQ(j.at("type"), "epoch") << line;
    ++n;
    EXPECT_EQ(j.at("epoch").get<int>(), n);
    EXPECT_EQ(j.at("step").get<int64_t>(), steps) << line;
    for (const char* key : {"train_loss", "test_accuracy", "seconds", "samples_per_second"}) {
      ASSERT_TRUE(j.contains(key)) << key << " missing in " << line;
      EXPECT_TRUE(j.at(key).is_number()) << key << " in " << line;
    }
    double acc = j.at("test_accuracy").get<double>();
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    EXPECT_GT(j.at("samples_per_second").get<double>(), 0.0);
  }
  EXPECT_EQ(n, 3);
  EXPECT_GT(steps, 3);
  // One summary line per epoch on stdout too.
  for (int e = 1; e <= 3; ++e) {
    EXPECT_NE(f.output.find("epoch " + std::to_string(e) + ": train loss"), std::string::npos)
        << f.output;
  }
}

TEST(TrainCli, ToyModelReportsTestLossAndNullAccuracy) {
  std::string path = make_temp_dir("toy") + "/m.jsonl";
  Finished f = run_command({kCohort, "train", "--model", "toy", "--dataset", "synthetic",
                            "--threads", "1", "--metrics", path});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::istringstream lines(read_file(path));
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  auto j = nlohmann::json::parse(last);
  ASSERT_EQ(j.at("type"), "epoch") << last;
  EXPECT_TRUE(j.at("test_accuracy").is_null());
  EXPECT_TRUE(j.at("train_loss").is_number());
  EXPECT_NE(f.output.find("test loss"), std::string::npos) << f.output;
}

TEST(TrainCli, DataParallelStrategyTrains) {
  Finished f = run_command(
      train_argv({"--strategy", "dp", "--replicas", "2", "--threads", "2", "--max-steps", "4"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("DataParallel, 2 replicas"), std::string::npos) << f.output;
}

}  // namespace
}  // namespace cohort::test

namespace cohort::test {
namespace {

// Where no GPU can be used (no CUDA in the build, or no device and driver),
// --device cuda fails before any data is read, naming what is missing.
TEST(TrainCli, DeviceCudaWithoutAGpuFailsAtOnceNamingWhatIsMissing) {
  Finished info = run_command({kCohort, "info"});
  ASSERT_EQ(info.exit_code, 0) << info.output;
  if (info.output.find("gpu cuda:0:") != std::string::npos)
    GTEST_SKIP() << "a GPU is present here: the cuda tests and scripts/gpu_check.sh cover it";
  Finished f = run_command(
      {kCohort, "train", "--device", "cuda", "--dataset", "synthetic", "--max-steps", "1"});
  EXPECT_NE(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("--device cuda"), std::string::npos) << f.output;
  const bool named = f.output.find("built without") != std::string::npos ||
                     f.output.find("not available") != std::string::npos;
  EXPECT_TRUE(named) << f.output;
  EXPECT_EQ(f.output.find("epoch 1"), std::string::npos) << f.output;
}

// A job's start-up line names the backend and why (--backend auto decides
// from the tensors' device and the GPUs per host: native for CPU tensors).
TEST(TrainCli, JobStartLineNamesTheBackendAndWhy) {
  Finished f = run_command(run_argv(2, {}, {"--strategy", "ddp", "--max-steps", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("cohort train: backend native (CPU tensors), rank 0 on cpu"),
            std::string::npos)
      << f.output;
  f = run_command(
      run_argv(2, {}, {"--strategy", "ddp", "--backend", "native", "--max-steps", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("cohort train: backend native (asked for), rank 0 on cpu"),
            std::string::npos)
      << f.output;
}

TEST(TrainCli, BackendNcclOnTheCpuIsRefusedNamingWhy) {
  Finished f = run_command(train_argv({"--backend", "nccl", "--max-steps", "1"}));
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("--backend nccl carries CUDA tensors only"), std::string::npos)
      << f.output;
}

TEST(TrainCli, BadDeviceSpellingNamesTheAcceptedOnes) {
  Finished f = run_command({kCohort, "train", "--device", "gpu0", "--max-steps", "1"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("'cpu', 'cuda' or 'cuda:N'"), std::string::npos) << f.output;
}

}  // namespace
}  // namespace cohort::test
