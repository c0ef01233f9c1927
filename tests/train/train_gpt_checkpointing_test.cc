// `cohort train --model gpt --activation-checkpointing block|attention`, end
// to end: under each strategy that trains a GPT (one process, DDP, ZeRO,
// pipeline, tensor parallel; 2 ranks under `cohort run`), a few AdamW steps of
// a tiny GPT (2 layers, width 32, block 16) with checkpointing end with the
// parameters and optimizer state of the same run without it. Unknown modes,
// and checkpointing a model without transformer blocks, are refused.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::vector<std::string> kBaseline = {"COHORT_KERNELS=baseline"};

// ~20 KB of word salad, deterministic.
std::string write_corpus(const std::string& dir) {
  const char* words[] = {"keep ",  "the ",  "inputs ", "and ",      "run ",  "it ",
                         "again ", "in ",   "the ",    "backward ", "pass ", "with ",
                         "one ",   "mask ", "each. ",  "so "};
  std::string text;
  uint32_t x = 4242;
  while (text.size() < 20000) {
    x = x * 1664525u + 1013904223u;
    text += words[(x >> 24) % 16];
  }
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

// `cohort train` (under `cohort run` with `nproc` ranks when nproc > 1).
Finished train(int nproc, const std::string& corpus, std::vector<std::string> extra) {
  std::vector<std::string> argv = {kCohort};
  if (nproc > 1)
    argv.insert(argv.end(), {"run", "--nproc-per-node", std::to_string(nproc), kCohort});
  for (const char* a :
       {"train", "--model",      "gpt",  "--n-layer",      "2",    "--n-head",    "2", "--n-embd",
        "32",    "--block-size", "16",   "--dataset",      "text", "--threads",   "1", "--seed",
        "5",     "--lr",         "3e-3", "--eval-batches", "1",    "--max-steps", "4"})
    argv.push_back(a);
  argv.insert(argv.end(), {"--data-file", corpus});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv, kBaseline);
}

// Trains with `strategy_args` twice, without and with `mode`, and expects the
// same final state (the recomputed forward is the same computation, so only
// the order of a few gradient sums may differ).
void expect_checkpointing_changes_nothing(const std::string& name, int nproc,
                                          std::vector<std::string> strategy_args,
                                          const std::string& mode) {
  SCOPED_TRACE(name + " with --activation-checkpointing " + mode);
  const std::string dir = make_temp_dir("gpt_ckpt_" + name);
  const std::string corpus = write_corpus(dir);
  std::vector<std::string> plain_args = strategy_args, ckpt_args = strategy_args;
  plain_args.insert(plain_args.end(), {"--checkpoint-dir", dir + "/plain"});
  ckpt_args.insert(ckpt_args.end(),
                   {"--activation-checkpointing", mode, "--checkpoint-dir", dir + "/ckpt"});
  Finished plain = train(nproc, corpus, plain_args);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  Finished ckpt = train(nproc, corpus, ckpt_args);
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.output;
  expect_close_checkpoints(step_dir(dir + "/plain", 4), step_dir(dir + "/ckpt", 4), 1e-6);
}

TEST(TrainGptCheckpointing, OneProcessMatchesTheRunWithout) {
  expect_checkpointing_changes_nothing("single", 1, {"--strategy", "single", "--batch-size", "4"},
                                       "block");
}

TEST(TrainGptCheckpointing, DdpOfTwoRanksMatchesTheRunWithout) {
  expect_checkpointing_changes_nothing("ddp", 2, {"--strategy", "ddp", "--batch-size", "2"},
                                       "block");
  expect_checkpointing_changes_nothing("ddp_attn", 2, {"--strategy", "ddp", "--batch-size", "2"},
                                       "attention");
}

TEST(TrainGptCheckpointing, ZeroStagesMatchTheRunWithout) {
  for (const char* stage : {"2", "3"})
    expect_checkpointing_changes_nothing(
        std::string("zero") + stage, 2,
        {"--strategy", "zero", "--zero-stage", stage, "--batch-size", "2"}, "block");
}

TEST(TrainGptCheckpointing, PipelineMatchesTheRunWithout) {
  expect_checkpointing_changes_nothing("pipeline", 2,
                                       {"--strategy", "pipeline", "--pipeline-schedule", "1f1b",
                                        "--micro-batches", "2", "--batch-size", "4"},
                                       "block");
}

TEST(TrainGptCheckpointing, TensorParallelMatchesTheRunWithout) {
  expect_checkpointing_changes_nothing("tensor", 2, {"--strategy", "tensor", "--batch-size", "4"},
                                       "attention");
}

TEST(TrainGptCheckpointing, UnknownModeAndModelsWithoutBlocksAreRefused) {
  const std::string dir = make_temp_dir("gpt_ckpt_bad");
  const std::string corpus = write_corpus(dir);
  Finished bad = train(1, corpus, {"--activation-checkpointing", "mlp"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("unknown mode 'mlp'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("block"), std::string::npos) << bad.output;
  Finished net = run_command({kCohort, "train", "--model", "net", "--dataset", "synthetic",
                              "--max-steps", "1", "--activation-checkpointing", "block"});
  EXPECT_NE(net.exit_code, 0);
  EXPECT_NE(net.output.find("--activation-checkpointing applies to --model gpt"), std::string::npos)
      << net.output;
}

}  // namespace
}  // namespace cohort::test
