// `cohort train --model gpt` under the model-parallel strategies and the
// parameter server, end to end: the real binary under `cohort run` on a
// small text file, a tiny GPT (2 layers, 2 heads, width 32, block 16), 20
// AdamW steps against one process with the same global batch and seed
// (COHORT_KERNELS=baseline: the runs differ only in the order of sums).
// Pipeline (1f1b, gpipe; 2 stages; 2 stages x 2 replicas) keeps the tied
// embedding/head weight on the first and last stage; tensor parallelism is
// Megatron's layout with the vocabulary-parallel cross-entropy (and with
// sequence parallelism); the
// parameter server (sync, 1 and 2 servers) numbers optimizer state through
// AdamW's decay groups. Checkpoints move between the strategies and `cohort
// eval` reads each.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::vector<std::string> kBaseline = {"COHORT_KERNELS=baseline"};

// ~20 KB of word salad, deterministic.
std::string write_corpus(const std::string& dir) {
  const char* words[] = {"a ",     "tied ", "head ",  "on ",    "the ", "last ",
                         "stage ", "and ",  "heads ", "split ", "by ",  "rank ",
                         "with ",  "one ",  "sum ",   "each. "};
  std::string text;
  uint32_t x = 777;
  while (text.size() < 20000) {
    x = x * 1664525u + 1013904223u;
    text += words[(x >> 24) % 16];
  }
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> gpt_train(const std::string& corpus, std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      "train", "--model",      "gpt", "--n-layer", "2",    "--n-head",       "2",    "--n-embd",
      "32",    "--block-size", "16",  "--dataset", "text", "--data-file",    corpus, "--threads",
      "1",     "--seed",       "5",   "--lr",      "3e-3", "--eval-batches", "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

Finished single(const std::string& corpus, std::vector<std::string> extra) {
  std::vector<std::string> argv = {kCohort};
  for (auto& a : gpt_train(corpus, std::move(extra))) argv.push_back(a);
  argv.insert(argv.end(), {"--strategy", "single"});
  return run_command(argv, kBaseline);
}

Finished ranks(int n, const std::string& corpus, std::vector<std::string> extra) {
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", std::to_string(n), kCohort};
  for (auto& a : gpt_train(corpus, std::move(extra))) argv.push_back(a);
  return run_command(argv, kBaseline);
}

// One process, batch 8 (the global batch of every run below), 20 steps.
std::string reference(const std::string& dir, const std::string& corpus) {
  Finished f =
      single(corpus, {"--batch-size", "8", "--max-steps", "20", "--checkpoint-dir", dir + "/one"});
  EXPECT_EQ(f.exit_code, 0) << f.output;
  return step_dir(dir + "/one", 20);
}

// Adam's m / sqrt(v) turns last-bit differences of gradients near zero (the
// key bias's is zero in exact arithmetic) into differences of ~1e-4 over 20
// steps at lr 3e-3; the runs' losses agree to 4 decimals.
constexpr double kAtol = 2e-4;

TEST(TrainGptModelParallel, PipelineSchedulesMatchOneProcess) {
  const std::string dir = make_temp_dir("gpt_pp");
  const std::string corpus = write_corpus(dir);
  const std::string one = reference(dir, corpus);
  for (std::string schedule : {"1f1b", "gpipe"}) {
    Finished f =
        ranks(2, corpus,
              {"--strategy", "pipeline", "--pipeline-schedule", schedule, "--micro-batches", "4",
               "--batch-size", "8", "--max-steps", "20", "--checkpoint-dir", dir + "/" + schedule});
    ASSERT_EQ(f.exit_code, 0) << f.output;
    EXPECT_NE(f.output.find("pipeline " + schedule + ": 2 stages"), std::string::npos) << f.output;
    expect_close_checkpoints(one, step_dir(dir + "/" + schedule, 20), kAtol);
  }
}

TEST(TrainGptModelParallel, PipelineTimesDataParallelMatchesOneProcess) {
  // 4 ranks = 2 stages x 2 replicas of batch 4.
  const std::string dir = make_temp_dir("gpt_ppdp");
  const std::string corpus = write_corpus(dir);
  const std::string one = reference(dir, corpus);
  Finished f = ranks(4, corpus,
                     {"--strategy", "pipeline", "--pipeline-stages", "2", "--micro-batches", "2",
                      "--batch-size", "4", "--max-steps", "20", "--checkpoint-dir", dir + "/pp"});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("2 stages x 2 replicas"), std::string::npos) << f.output;
  expect_close_checkpoints(one, step_dir(dir + "/pp", 20), kAtol);
}

TEST(TrainGptModelParallel, TensorParallelMatchesOneProcess) {
  // With and without sequence parallelism (T = 16 positions, 8 per rank
  // between the tensor-parallel regions).
  const std::string dir = make_temp_dir("gpt_tp");
  const std::string corpus = write_corpus(dir);
  const std::string one = reference(dir, corpus);
  for (bool sp : {false, true}) {
    const std::string out = dir + (sp ? "/sp" : "/tp");
    std::vector<std::string> args = {"--strategy",  "tensor", "--batch-size",     "8",
                                     "--max-steps", "20",     "--checkpoint-dir", out};
    if (sp) args.push_back("--sequence-parallel");
    Finished f = ranks(2, corpus, args);
    ASSERT_EQ(f.exit_code, 0) << f.output;
    EXPECT_NE(f.output.find(sp ? "cross-entropy, sequence parallel" : "vocabulary-parallel"),
              std::string::npos)
        << f.output;
    expect_close_checkpoints(one, step_dir(out, 20), kAtol);
  }
}

TEST(TrainGptModelParallel, ParameterServerMatchesOneProcess) {
  // Sync mode over 2 trainers of batch 4 (GPT training clips nothing, so
  // this is DDP's step); with 2 servers the weights and the optimizer state
  // are split and put back together by name and by AdamW's groups.
  const std::string dir = make_temp_dir("gpt_ps");
  const std::string corpus = write_corpus(dir);
  const std::string one = reference(dir, corpus);
  for (int servers : {1, 2}) {
    const std::string out = dir + "/ps" + std::to_string(servers);
    Finished f = ranks(2 + servers, corpus,
                       {"--strategy", "ps", "--ps-servers", std::to_string(servers), "--batch-size",
                        "4", "--max-steps", "20", "--checkpoint-dir", out});
    ASSERT_EQ(f.exit_code, 0) << f.output;
    expect_close_checkpoints(one, step_dir(out, 20), kAtol);
  }
}

double validation_loss(const std::string& eval_output) {
  std::smatch m;
  if (!std::regex_search(eval_output, m, std::regex("validation loss ([0-9.]+)"))) {
    ADD_FAILURE() << "no validation loss in\n" << eval_output;
    return -1;
  }
  return std::stod(m[1]);
}

TEST(TrainGptModelParallel, CheckpointsMoveBetweenStrategies) {
  // pipeline -> tensor -> single -> pipeline (gpipe) -> ps: each resumed run
  // continues the straight one-process run; `cohort eval` reads every
  // checkpoint, and the last evaluates as the straight run's does.
  const std::string dir = make_temp_dir("gpt_mv");
  const std::string corpus = write_corpus(dir);
  Finished s = single(corpus, {"--batch-size", "8", "--max-steps", "10", "--checkpoint-every", "8",
                               "--checkpoint-dir", dir + "/straight"});
  ASSERT_EQ(s.exit_code, 0) << s.output;
  auto batch = std::vector<std::string>{"--batch-size", "8"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), batch.begin(), batch.end());
    return a;
  };
  Finished a = ranks(2, corpus,
                     with({"--strategy", "pipeline", "--micro-batches", "2", "--max-steps", "2",
                           "--checkpoint-dir", dir + "/a"}));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  Finished b = ranks(2, corpus,
                     with({"--strategy", "tensor", "--max-steps", "4", "--checkpoint-dir",
                           dir + "/b", "--resume", step_dir(dir + "/a", 2)}));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  Finished c = single(corpus, with({"--max-steps", "6", "--checkpoint-dir", dir + "/c", "--resume",
                                    step_dir(dir + "/b", 4)}));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  Finished d = ranks(2, corpus,
                     with({"--strategy", "pipeline", "--pipeline-schedule", "gpipe",
                           "--micro-batches", "4", "--max-steps", "8", "--checkpoint-dir",
                           dir + "/d", "--resume", step_dir(dir + "/c", 6)}));
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("resumed from " + step_dir(dir + "/c", 6) + " at step 6"),
            std::string::npos)
      << d.output;
  expect_close_checkpoints(step_dir(dir + "/straight", 8), step_dir(dir + "/d", 8), kAtol);

  // The parameter server takes the weights and each server its share of the
  // optimizer state, and continues too (one trainer: the same batch per
  // rank, so the same windows).
  Finished e = ranks(2, corpus,
                     with({"--strategy", "ps", "--ps-servers", "1", "--max-steps", "10",
                           "--checkpoint-dir", dir + "/e", "--resume", step_dir(dir + "/d", 8)}));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  expect_close_checkpoints(step_dir(dir + "/straight", 10), step_dir(dir + "/e", 10), kAtol);

  double straight_loss = 0;
  for (const std::string run : {"straight", "a", "b", "c", "d", "e"}) {
    Finished ev = run_command({kCohort, "eval", "--checkpoint", dir + "/" + run, "--threads", "1"},
                              kBaseline);
    ASSERT_EQ(ev.exit_code, 0) << run << ": " << ev.output;
    const double loss = validation_loss(ev.output);
    if (run == "straight") straight_loss = loss;
    if (run == "e") EXPECT_NEAR(loss, straight_loss, 1e-3) << ev.output;
  }
}

}  // namespace
}  // namespace cohort::test
