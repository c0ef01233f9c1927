// `cohort train --checkpoint-async true` under `cohort run` with 2 ranks:
// DDP (whole checkpoints, rank 0 writes in the background) and ZeRO
// (sharded: every rank writes its file in the background, rank 0 commits).
// The background checkpoints hold the same bytes as the synchronous ones of
// the same run, every one is committed (the last one waited for before the
// run ends, no temporary left), and a run resumed from them ends where the
// uninterrupted run ends.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cohort/checkpoint/safetensors.h"
#include "cohort/checkpoint/sharded_checkpoint.h"
#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

namespace fs = std::filesystem;

void expect_ok(const Finished& f) { ASSERT_EQ(f.exit_code, 0) << f.output; }

std::map<std::string, std::string> dir_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// The same files with the same bytes, but for the training time recorded in
// the training state (the runs are deterministic, their clocks are not).
void expect_same_files(const std::string& a, const std::string& b) {
  const auto fa = dir_bytes(a), fb = dir_bytes(b);
  ASSERT_EQ(fa.size(), fb.size()) << a << " vs " << b;
  for (const auto& [name, bytes] : fa) {
    auto it = fb.find(name);
    ASSERT_TRUE(it != fb.end()) << name << " missing in " << b;
    if (it->second == bytes) continue;
    auto ha = checkpoint::read_safetensors_header(a + "/" + name);
    auto hb = checkpoint::read_safetensors_header(b + "/" + name);
    ha.metadata.erase("extra.epoch_seconds");
    hb.metadata.erase("extra.epoch_seconds");
    EXPECT_EQ(ha.metadata, hb.metadata) << name << ": " << a << " vs " << b;
    // Then the tensors' bytes (the data sections have the same layout).
    ASSERT_EQ(ha.tensors.size(), hb.tensors.size()) << name;
    EXPECT_TRUE(bytes.substr(ha.data_start) == it->second.substr(hb.data_start))
        << name << " differs: " << a << " vs " << b;
  }
}

// Only step-* directories: no temporary of a background write is left.
void expect_only_checkpoints(const std::string& root) {
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.starts_with("step-") || name == ".write-check") << e.path();
  }
}

// 2 ranks of `strategy` with the global batch of 64.
std::vector<std::string> two_ranks(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--batch-size", "32"};
  a.insert(a.end(), extra.begin(), extra.end());
  return run_argv(2, {}, a);
}

TEST(TrainAsyncCheckpoint, DdpResumesFromBackgroundCheckpoints) {
  const std::string straight = make_temp_dir("async-ddp-straight");
  expect_ok(run_command(
      two_ranks({"--max-steps", "3", "--checkpoint-every", "1", "--checkpoint-dir", straight})));
  const std::string first = make_temp_dir("async-ddp-first");
  Finished f = run_command(two_ranks({"--max-steps", "2", "--checkpoint-every", "1",
                                      "--checkpoint-async", "true", "--checkpoint-dir", first}));
  expect_ok(f);
  // Both reported once committed, the last one before the run ended.
  EXPECT_NE(f.output.find("checkpoint: " + step_dir(first, 1) + " (step 1)"), std::string::npos)
      << f.output;
  EXPECT_NE(f.output.find("checkpoint: " + step_dir(first, 2) + " (step 2)"), std::string::npos)
      << f.output;
  expect_only_checkpoints(first);
  for (int step : {1, 2}) expect_same_files(step_dir(straight, step), step_dir(first, step));

  Finished r = run_command(two_ranks({"--max-steps", "3", "--checkpoint-async", "true",
                                      "--checkpoint-dir", first, "--resume", "auto"}));
  expect_ok(r);
  EXPECT_NE(r.output.find("resumed from " + step_dir(first, 2)), std::string::npos) << r.output;
  expect_close_checkpoints(step_dir(straight, 3), step_dir(first, 3));
}

TEST(TrainAsyncCheckpoint, ZeroShardedResumesFromBackgroundCheckpoints) {
  auto zero = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--strategy",          "zero",   "--zero-stage", "3",
                                  "--checkpoint-format", "sharded"};
    a.insert(a.end(), extra.begin(), extra.end());
    return two_ranks(a);
  };
  const std::string straight = make_temp_dir("async-zero-straight");
  expect_ok(run_command(
      zero({"--max-steps", "3", "--checkpoint-every", "1", "--checkpoint-dir", straight})));
  const std::string first = make_temp_dir("async-zero-first");
  expect_ok(run_command(zero({"--max-steps", "2", "--checkpoint-every", "1", "--checkpoint-async",
                              "true", "--checkpoint-dir", first})));
  expect_only_checkpoints(first);
  for (int step : {1, 2}) {
    ASSERT_TRUE(fs::exists(step_dir(first, step) + "/" + checkpoint::rank_file_name(1, 2)));
    expect_same_files(step_dir(straight, step), step_dir(first, step));
  }

  expect_ok(run_command(zero({"--max-steps", "3", "--checkpoint-async", "true", "--checkpoint-dir",
                              first, "--resume", "auto"})));
  // Resumed: the same state as the uninterrupted run, compared whole.
  checkpoint::reshard_checkpoint(step_dir(straight, 3), straight + "/whole-3", 0);
  checkpoint::reshard_checkpoint(step_dir(first, 3), first + "/whole-3", 0);
  expect_close_checkpoints(straight + "/whole-3", first + "/whole-3");
}

TEST(TrainAsyncCheckpoint, NeedsACheckpointDir) {
  Finished f = run_command(train_argv({"--checkpoint-async", "true", "--max-steps", "1"}));
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.output.find("--checkpoint-async true needs --checkpoint-dir"), std::string::npos)
      << f.output;
}

}  // namespace
}  // namespace cohort::test
