// `cohort eval` and `cohort predict` on a checkpoint of a short synthetic run:
// eval reproduces the run's last test numbers, predict prints one line per
// image, and bad inputs fail naming what was wrong.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

// Trains 3 steps with checkpoints and a metrics file, once for the suite.
class TrainEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("eval"));
    Finished f = run_command(train_argv({"--max-steps", "3", "--checkpoint-dir", *dir_ + "/ckpt",
                                         "--metrics", *dir_ + "/metrics.jsonl"}));
    ASSERT_EQ(f.exit_code, 0) << f.output;
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string ckpt() { return *dir_ + "/ckpt"; }
  static std::string dir() { return *dir_; }

  static Finished predict(const std::string& images, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {kCohort,    "predict", "--checkpoint", ckpt(),
                                     "--images", images,    "--threads",    "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  }

  // Expects `n` lines "image i: class c ..." with c in 0..9.
  static void expect_predictions(const std::string& output, int n) {
    std::istringstream lines(output);
    std::string line;
    int i = 0;
    const std::regex re(R"(^image (\d+): class (\d+) .*p=[01]\.\d\d$)");
    while (std::getline(lines, line)) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, re)) << line;
      EXPECT_EQ(std::stoi(m[1]), i);
      EXPECT_LT(std::stoi(m[2]), 10) << line;
      ++i;
    }
    EXPECT_EQ(i, n) << output;
  }

  static std::string* dir_;
};

std::string* TrainEval::dir_ = nullptr;

TEST_F(TrainEval, EvalPrintsTheRunsLastEpochNumbers) {
  std::istringstream lines(read_file(dir() + "/metrics.jsonl"));
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  auto j = nlohmann::json::parse(last);
  const std::string want =
      fmt::format("test loss {:.4f}, test accuracy {:.4f} on 128 examples",
                  j.at("test_loss").get<double>(), j.at("test_accuracy").get<double>());
  // The root (its latest checkpoint) and the checkpoint directory itself.
  for (const std::string& path : {ckpt(), step_dir(ckpt(), 3)}) {
    Finished f = run_command({kCohort, "eval", "--checkpoint", path, "--dataset", "synthetic",
                              "--synthetic-train-size", "512", "--synthetic-test-size", "128",
                              "--seed", "7", "--threads", "1"});
    ASSERT_EQ(f.exit_code, 0) << f.output;
    EXPECT_NE(f.output.find("(model net, step 3)"), std::string::npos) << f.output;
    EXPECT_NE(f.output.find(want), std::string::npos) << "want '" << want << "' in\n" << f.output;
  }
}

TEST_F(TrainEval, EvalOfMissingCheckpointNamesIt) {
  const std::string missing = dir() + "/no-such-checkpoint";
  Finished f = run_command({kCohort, "eval", "--checkpoint", missing, "--dataset", "synthetic"});
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find(missing), std::string::npos) << f.output;
}

TEST_F(TrainEval, EvalWithOtherModelNamesBoth) {
  Finished f = run_command(
      {kCohort, "eval", "--checkpoint", ckpt(), "--model", "mlp", "--dataset", "synthetic"});
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find("--model mlp"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("model net"), std::string::npos) << f.output;
}

TEST_F(TrainEval, PredictRawImage) {
  const std::string path = dir() + "/raw.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 784; ++i) out.put(static_cast<char>(i * 7 % 256));
  }
  Finished f = predict(path);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  expect_predictions(f.output, 1);
}

TEST_F(TrainEval, PredictIdx3FileWithTopAndLimit) {
  const std::string path = dir() + "/images-idx3-ubyte";
  {
    std::ofstream out(path, std::ios::binary);
    const unsigned char header[16] = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 28, 0, 0, 0, 28};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    for (int i = 0; i < 5 * 784; ++i) out.put(static_cast<char>(i * 13 % 256));
  }
  Finished f = predict(path);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  expect_predictions(f.output, 5);

  f = predict(path, {"--top", "3", "--limit", "2"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  expect_predictions(f.output, 2);
  EXPECT_NE(f.output.find("image 1: class"), std::string::npos) << f.output;
  // Three "class" entries per line.
  std::istringstream lines(f.output);
  std::string line;
  while (std::getline(lines, line)) {
    size_t count = 0;
    for (size_t p = line.find("class "); p != std::string::npos; p = line.find("class ", p + 1))
      ++count;
    EXPECT_EQ(count, 3u) << line;
  }
}

TEST_F(TrainEval, PredictRejectsABadFileNamingIt) {
  const std::string path = dir() + "/bad.bin";
  std::ofstream(path, std::ios::binary) << "definitely not an image";
  Finished f = predict(path);
  EXPECT_EQ(f.exit_code, 1) << f.output;
  EXPECT_NE(f.output.find(path), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("not an IDX3"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("image 0:"), std::string::npos) << f.output;
}

}  // namespace
}  // namespace cohort::test
