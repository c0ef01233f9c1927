// Shared pieces of the `cohort train` end-to-end tests: the command lines of
// small synthetic runs and comparisons of the checkpoints they leave.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cohort/checkpoint/checkpoint.h"
#include "cohort/checkpoint/safetensors.h"
#include "tests/train/process_util.h"

namespace cohort::test {

inline const std::string kCohort = COHORT_BIN;

// `binary train` (the cohort CLI or a test build of it) of `model` on a
// small synthetic set: 512 training examples (8 steps of 64 per epoch in one
// process, 4 per rank with two), one thread per process.
inline std::vector<std::string> train_argv_of(const std::string& binary, const std::string& model,
                                              std::vector<std::string> extra) {
  std::vector<std::string> argv = {binary,
                                   "train",
                                   "--model",
                                   model,
                                   "--dataset",
                                   "synthetic",
                                   "--synthetic-train-size",
                                   "512",
                                   "--synthetic-test-size",
                                   "128",
                                   "--threads",
                                   "1",
                                   "--lr",
                                   "0.002",
                                   "--seed",
                                   "7"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Net by the cohort CLI.
inline std::vector<std::string> train_argv(std::vector<std::string> extra) {
  return train_argv_of(kCohort, "net", std::move(extra));
}

// The same under `cohort run --nproc-per-node n` (one thread per worker).
inline std::vector<std::string> run_argv(int n, std::vector<std::string> launcher_extra,
                                         std::vector<std::string> train_extra) {
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", std::to_string(n)};
  argv.insert(argv.end(), launcher_extra.begin(), launcher_extra.end());
  auto t = train_argv(std::move(train_extra));
  argv.insert(argv.end(), t.begin(), t.end());
  return argv;
}

inline std::string step_dir(const std::string& root, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return root + "/" + name;
}

// Expects two safetensors files to hold the same tensors with the same
// values (bit for bit: the runs are deterministic).
inline void expect_same_tensors(const std::string& a, const std::string& b) {
  auto ta = checkpoint::load_safetensors(a).tensors;
  auto tb = checkpoint::load_safetensors(b).tensors;
  ASSERT_EQ(ta.keys(), tb.keys()) << a << " vs " << b;
  for (const auto& [name, t] : ta) {
    EXPECT_TRUE(equal(t, tb.at(name))) << name << " differs between " << a << " and " << b;
  }
}

inline void expect_same_checkpoint(const std::string& a, const std::string& b) {
  expect_same_tensors(a + "/" + checkpoint::kModelFile, b + "/" + checkpoint::kModelFile);
  expect_same_tensors(a + "/" + checkpoint::kOptimizerFile, b + "/" + checkpoint::kOptimizerFile);
}

// Expects the same tensor names and values within float32 tolerance (atol:
// what a run's optimizer may amplify, e.g. Adam's m / sqrt(v) on gradients
// near zero, where two orders of summation differ in the last bits).
inline void expect_close_tensors(const std::string& a, const std::string& b, double atol = 1e-5) {
  auto ta = checkpoint::load_safetensors(a).tensors;
  auto tb = checkpoint::load_safetensors(b).tensors;
  ASSERT_EQ(ta.keys(), tb.keys()) << a << " vs " << b;
  for (const auto& [name, t] : ta) {
    EXPECT_TRUE(allclose(t, tb.at(name), 1e-4, atol))
        << name << " differs between " << a << " and " << b;
  }
}

inline void expect_close_checkpoints(const std::string& a, const std::string& b,
                                     double atol = 1e-5) {
  expect_close_tensors(a + "/" + checkpoint::kModelFile, b + "/" + checkpoint::kModelFile, atol);
  expect_close_tensors(a + "/" + checkpoint::kOptimizerFile, b + "/" + checkpoint::kOptimizerFile,
                       atol);
}

}  // namespace cohort::test
