// `cohort train --strategy zero --checkpoint-format sharded` and `cohort
// reshard`: a sharded checkpoint written at 4 ranks resumes at 2 and at 1
// rank (other stages), and one written at 2 back at 4, to the same state as
// an uninterrupted run (and DDP resumes from it), when the global batch
// (ranks x --batch-size) is kept:
// the sampler's position is rescaled to the new world size, so the next
// steps draw the same examples. The shards convert to the whole checkpoint
// the same run writes with --checkpoint-format whole, bit for bit, and back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cohort/checkpoint/sharded_checkpoint.h"
#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

// ZeRO at n ranks with the global batch of 64 (n x 64 / n), on top of train_argv.
std::vector<std::string> zero_run(int n, int stage, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--strategy",          "zero",         "--zero-stage",
                                std::to_string(stage), "--batch-size", std::to_string(64 / n)};
  a.insert(a.end(), extra.begin(), extra.end());
  return run_argv(n, {}, a);
}

void expect_ok(const Finished& f) { ASSERT_EQ(f.exit_code, 0) << f.output; }

TEST(TrainZeroCheckpoint, ShardedAtFourResumesAtTwoAndOneAndBackAtFour) {
  // The uninterrupted run: 4 ranks, 4 steps, whole checkpoints at 3 and 4.
  const std::string straight = make_temp_dir("zckpt-straight");
  expect_ok(run_command(zero_run(
      4, 3, {"--max-steps", "4", "--checkpoint-every", "1", "--checkpoint-dir", straight})));
  // 2 steps at 4 ranks, sharded.
  const std::string first = make_temp_dir("zckpt-first");
  expect_ok(run_command(zero_run(
      4, 3, {"--max-steps", "2", "--checkpoint-format", "sharded", "--checkpoint-dir", first})));
  ASSERT_TRUE(std::filesystem::exists(step_dir(first, 2) + "/" + checkpoint::rank_file_name(3, 4)));
  // Resumed at 2 ranks (stage 1) and at 1 rank (stage 2) for the third step.
  for (auto [n, stage] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const std::string dir = make_temp_dir("zckpt-at" + std::to_string(n));
    Finished f = run_command(zero_run(n, stage,
                                      {"--max-steps", "3", "--checkpoint-format", "sharded",
                                       "--checkpoint-dir", dir, "--resume", step_dir(first, 2)}));
    expect_ok(f);
    EXPECT_NE(f.output.find("resumed from " + step_dir(first, 2)), std::string::npos) << f.output;
    const std::string whole = dir + "/whole-3";
    checkpoint::reshard_checkpoint(step_dir(dir, 3), whole, 0);
    expect_close_checkpoints(step_dir(straight, 3), whole);
    if (n != 2) continue;
    // The 2-rank checkpoint back at 4 ranks for the fourth step.
    const std::string back = make_temp_dir("zckpt-back");
    expect_ok(run_command(zero_run(
        4, 3, {"--max-steps", "4", "--checkpoint-dir", back, "--resume", step_dir(dir, 3)})));
    expect_close_checkpoints(step_dir(straight, 4), step_dir(back, 4));
  }
  // DDP resumes from the shards too (every tensor read whole).
  const std::string ddp = make_temp_dir("zckpt-ddp");
  expect_ok(run_command(run_argv(2, {},
                                 {"--batch-size", "32", "--max-steps", "3", "--checkpoint-dir", ddp,
                                  "--resume", step_dir(first, 2)})));
  expect_close_checkpoints(step_dir(straight, 3), step_dir(ddp, 3));
}

TEST(TrainZeroCheckpoint, ReshardGivesTheWholeCheckpointBitForBitAndBack) {
  const std::string whole = make_temp_dir("zckpt-whole");
  expect_ok(run_command(zero_run(4, 3, {"--max-steps", "2", "--checkpoint-dir", whole})));
  const std::string sharded = make_temp_dir("zckpt-sharded");
  expect_ok(run_command(zero_run(
      4, 3, {"--max-steps", "2", "--checkpoint-format", "sharded", "--checkpoint-dir", sharded})));
  const std::string out = make_temp_dir("zckpt-reshard");
  Finished a =
      run_command({kCohort, "reshard", step_dir(sharded, 2), out + "/w3", "--world-size", "3"});
  expect_ok(a);
  EXPECT_NE(a.output.find("sharded over 4 ranks"), std::string::npos) << a.output;
  expect_ok(run_command({kCohort, "reshard", out + "/w3", out + "/whole", "--whole"}));
  expect_same_checkpoint(step_dir(whole, 2), out + "/whole");
  // Whole -> 4 ranks -> whole again: the same bytes.
  expect_ok(run_command({kCohort, "reshard", out + "/whole", out + "/w4", "--world-size", "4"}));
  expect_ok(run_command({kCohort, "reshard", out + "/w4", out + "/whole2", "--whole"}));
  expect_same_checkpoint(out + "/whole", out + "/whole2");
  // `cohort eval` reads the sharded checkpoint as the whole one.
  auto eval = [](const std::string& path) {
    return run_command({kCohort, "eval", "--checkpoint", path, "--dataset", "synthetic",
                        "--synthetic-train-size", "512", "--synthetic-test-size", "128", "--seed",
                        "7", "--threads", "1"});
  };
  Finished e1 = eval(step_dir(sharded, 2)), e2 = eval(out + "/whole");
  expect_ok(e1);
  expect_ok(e2);
  EXPECT_NE(e1.output.find("test accuracy"), std::string::npos) << e1.output;
  EXPECT_EQ(e1.output.substr(e1.output.find("test accuracy")),
            e2.output.substr(e2.output.find("test accuracy")));
  Finished bad = run_command({kCohort, "reshard", out + "/w4", out + "/x"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--world-size"), std::string::npos) << bad.output;
}

// A tiny GPT (tied embedding and head, AdamW in two groups, clipping) on a
// small text: 2 ranks x 4 windows, sharded, resumed at 1 rank x 8 (the window
// sampler's same global draws), ends where the uninterrupted run ends.
TEST(TrainZeroCheckpoint, GptShardedAtTwoResumesAtOneWithTheSameWindows) {
  const std::string dir = make_temp_dir("zckpt-gpt");
  std::string text;
  const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog "};
  for (uint32_t x = 7; text.size() < 20000;) {
    x = x * 1664525u + 1013904223u;
    text += words[(x >> 24) % 8];
  }
  std::ofstream(dir + "/corpus.txt") << text;
  auto gpt = [&](int n, int stage, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--strategy",     "zero",
                                  "--zero-stage",   std::to_string(stage),
                                  "--batch-size",   std::to_string(8 / n),
                                  "--model",        "gpt",
                                  "--n-layer",      "2",
                                  "--n-head",       "2",
                                  "--n-embd",       "32",
                                  "--block-size",   "16",
                                  "--dataset",      "text",
                                  "--data-file",    dir + "/corpus.txt",
                                  "--threads",      "1",
                                  "--seed",         "3",
                                  "--lr",           "3e-3",
                                  "--eval-batches", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    std::vector<std::string> argv = {kCohort,           "run",   "--nproc-per-node",
                                     std::to_string(n), kCohort, "train"};
    argv.insert(argv.end(), a.begin(), a.end());
    return run_command(argv, {"COHORT_KERNELS=baseline"});
  };
  expect_ok(gpt(2, 3, {"--max-steps", "6", "--checkpoint-dir", dir + "/straight"}));
  expect_ok(gpt(
      2, 3,
      {"--max-steps", "3", "--checkpoint-format", "sharded", "--checkpoint-dir", dir + "/first"}));
  Finished f = gpt(1, 2,
                   {"--max-steps", "6", "--checkpoint-dir", dir + "/second", "--resume",
                    step_dir(dir + "/first", 3)});
  expect_ok(f);
  EXPECT_NE(f.output.find("at step 3"), std::string::npos) << f.output;
  expect_close_checkpoints(step_dir(dir + "/straight", 6), step_dir(dir + "/second", 6), 2e-4);
}

TEST(TrainZeroCheckpoint, ShardedFormatNeedsZero) {
  Finished f = run_command(train_argv({"--checkpoint-format", "sharded", "--max-steps", "1"}));
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.output.find("--checkpoint-format sharded applies to --strategy zero"),
            std::string::npos)
      << f.output;
}

}  // namespace
}  // namespace cohort::test
