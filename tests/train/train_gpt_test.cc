// `cohort train --model gpt` end to end: the real binary on a small text file
// (a tiny GPT, so each run takes a second or two), its checkpoints under
// `cohort eval` and `cohort generate`, and DDP against one process with the
// same global batch (the window sampler gives rank r its slice of one global
// draw, so 2 ranks x B equal 1 process x 2B to float32 tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::vector<std::string> kBaseline = {"COHORT_KERNELS=baseline"};

// ~40 KB of English-like text, deterministic.
std::string write_corpus(const std::string& dir) {
  const char* words[] = {"the ", "cat ", "sat ", "on ",  "a ",     "mat ",  "and ", "dog ",
                         "ran ", "to ",  "its ", "old ", "house ", "with ", "red ", "door. "};
  std::string text;
  uint32_t x = 12345;
  while (text.size() < 40000) {
    x = x * 1664525u + 1013904223u;
    text += words[(x >> 24) % 16];
    if ((x >> 8) % 11 == 0) text += "\n";
  }
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> gpt_argv(const std::string& corpus, std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      kCohort,     "train", "--model",      "gpt", "--n-layer", "2",    "--n-head",       "2",
      "--n-embd",  "32",    "--block-size", "16",  "--dataset", "text", "--data-file",    corpus,
      "--threads", "1",     "--seed",       "3",   "--lr",      "3e-3", "--eval-batches", "4"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Long-context runs use tiny batches; batch 2 is below the pipeline's
// default micro-batch count, which must not matter outside a pipeline (issue 34).
TEST(TrainGpt, TrainsWithABatchOfTwo) {
  const std::string dir = make_temp_dir("gpt_batch2");
  const std::string corpus = write_corpus(dir);
  Finished f =
      run_command(gpt_argv(corpus, {"--batch-size", "2", "--max-steps", "3", "--log-every", "1"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("step 3/"), std::string::npos) << f.output;
}

TEST(TrainGpt, TrainsOnTextAndReportsTokensPerSecondAndPerplexity) {
  const std::string dir = make_temp_dir("gpt_train");
  const std::string corpus = write_corpus(dir);
  Finished f =
      run_command(gpt_argv(corpus, {"--batch-size", "8", "--max-steps", "30", "--log-every", "10",
                                    "--checkpoint-dir", dir + "/ckpt"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("train tokens"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("tokens/s"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("perplexity"), std::string::npos) << f.output;

  Finished e = run_command({kCohort, "eval", "--checkpoint", dir + "/ckpt", "--threads", "1"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("validation loss"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("n_layer=2"), std::string::npos) << e.output;

  Finished g = run_command({kCohort, "generate", "--checkpoint", dir + "/ckpt", "--prompt",
                            "the cat", "--max-new-tokens", "40", "--seed", "1", "--threads", "1"});
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.rfind("the cat", 0), 0u) << g.output;
  EXPECT_GE(g.output.size(), 7u + 40u) << g.output;
}

TEST(TrainGpt, DdpOfTwoRanksMatchesOneProcessWithTheirGlobalBatch) {
  const std::string dir = make_temp_dir("gpt_ddp");
  const std::string corpus = write_corpus(dir);
  Finished one =
      run_command(gpt_argv(corpus, {"--batch-size", "8", "--max-steps", "20", "--strategy",
                                    "single", "--checkpoint-dir", dir + "/one"}),
                  kBaseline);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "2"};
  for (const std::string& a : gpt_argv(
           corpus, {"--batch-size", "4", "--max-steps", "20", "--checkpoint-dir", dir + "/ddp"}))
    argv.push_back(a);
  Finished ddp = run_command(argv, kBaseline);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  EXPECT_NE(ddp.output.find("DDP, 2 ranks"), std::string::npos) << ddp.output;
  // The runs differ only in the order of the gradient sums (two halves
  // averaged by all_reduce against one mean); 20 AdamW steps at lr 3e-3 move
  // weights by up to 0.06, and Adam's m / sqrt(v) amplifies last-bit
  // differences of near-zero gradients (GELU's flat side) to ~1e-4.
  expect_close_checkpoints(step_dir(dir + "/one", 20), step_dir(dir + "/ddp", 20), 2e-4);
}

// A run of 1 x 8 windows per step stopped at step 5 and resumed as 2 ranks x
// 4 ends where the uninterrupted run ends: the sampler's position is kept in
// steps, and the ranks' slices of each step's draw are the 8 windows.
TEST(TrainGpt, ResumedAsDdpWithTheSameGlobalBatchContinuesTheSameWindows) {
  const std::string dir = make_temp_dir("gpt_resume");
  const std::string corpus = write_corpus(dir);
  Finished straight =
      run_command(gpt_argv(corpus, {"--batch-size", "8", "--max-steps", "10", "--strategy",
                                    "single", "--checkpoint-dir", dir + "/straight"}),
                  kBaseline);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  Finished first =
      run_command(gpt_argv(corpus, {"--batch-size", "8", "--max-steps", "5", "--strategy", "single",
                                    "--checkpoint-dir", dir + "/first"}),
                  kBaseline);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "2"};
  for (const std::string& a :
       gpt_argv(corpus, {"--batch-size", "4", "--max-steps", "10", "--checkpoint-dir",
                         dir + "/second", "--resume", step_dir(dir + "/first", 5)}))
    argv.push_back(a);
  Finished second = run_command(argv, kBaseline);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("at step 5"), std::string::npos) << second.output;
  expect_close_checkpoints(step_dir(dir + "/straight", 10), step_dir(dir + "/second", 10), 2e-4);
}

// A few hundred steps on the default corpus (Debian's fortunes) teach a small
// model English's bytes: the sample is mostly letters and spaces, with spaces
// at a word's rate. An untrained model samples all 256 bytes about evenly
// (about 20 % letters), so the check can fail.
TEST(TrainGpt, GenerateAfterTrainingOnTheDefaultCorpusWritesLettersAndSpaces) {
  const std::string dir = make_temp_dir("gpt_generate");
  Finished f = run_command({kCohort,
                            "train",
                            "--model",
                            "gpt",
                            "--n-layer",
                            "2",
                            "--n-head",
                            "2",
                            "--n-embd",
                            "48",
                            "--block-size",
                            "32",
                            "--batch-size",
                            "16",
                            "--lr",
                            "5e-3",
                            "--max-steps",
                            "250",
                            "--threads",
                            "1",
                            "--eval-batches",
                            "2",
                            "--seed",
                            "1",
                            "--checkpoint-dir",
                            dir});
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("fortunes"), std::string::npos) << f.output;
  Finished g = run_command({kCohort, "generate", "--checkpoint", dir, "--prompt", "The ",
                            "--max-new-tokens", "400", "--seed", "2", "--threads", "1"});
  ASSERT_EQ(g.exit_code, 0) << g.output;
  ASSERT_GE(g.output.size(), 404u) << g.output;
  const std::string sample = g.output.substr(4, 400);
  int letters = 0, spaces = 0;
  for (unsigned char c : sample) {
    letters += std::isalpha(c) != 0;
    spaces += c == ' ';
  }
  EXPECT_GE(letters + spaces, 300) << sample;  // >= 75 % letters and spaces
  EXPECT_GE(spaces, 30) << sample;             // words: 8-35 % spaces
  EXPECT_LE(spaces, 140) << sample;
}

// llm.c's token shard format: 256 int32 header (magic, version, count), then
// uint16 tokens; a *_val_* shard is the validation split.
void write_shard(const std::string& path, int n, uint32_t seed) {
  std::string bytes(1024, '\0');
  const int32_t header[3] = {20240520, 1, n};
  std::memcpy(bytes.data(), header, sizeof(header));
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const uint16_t t = static_cast<uint16_t>(i % 7 == 0 ? 400 + (seed >> 28) : (seed >> 24) % 64);
    bytes.append(reinterpret_cast<const char*>(&t), 2);
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TrainGpt, TrainsOnTokenShardsWithTheirValidationShard) {
  const std::string dir = make_temp_dir("gpt_tokens");
  write_shard(dir + "/toy_train_000001.bin", 20000, 1);
  write_shard(dir + "/toy_val_000000.bin", 3000, 2);
  std::vector<std::string> argv =
      gpt_argv("", {"--batch-size", "4", "--max-steps", "5", "--vocab-size", "512",
                    "--checkpoint-dir", dir + "/ckpt"});
  auto file = std::find(argv.begin(), argv.end(), "--data-file");
  *(file + 1) = dir;
  *(file - 1) = "tokens";
  Finished f = run_command(argv);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("train 20000"), std::string::npos) << f.output;
  Finished g = run_command({kCohort, "generate", "--checkpoint", dir + "/ckpt", "--prompt-tokens",
                            "1,2,3", "--max-new-tokens", "5", "--threads", "1"});
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(std::count(g.output.begin(), g.output.end(), ','), 7) << g.output;
  // A token at or past the vocabulary is named with its file.
  write_shard(dir + "/big_train.bin", 100, 3);
  *(file + 1) = dir + "/big_train.bin";
  argv[std::find(argv.begin(), argv.end(), "512") - argv.begin()] = "300";
  f = run_command(argv);
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.output.find("big_train.bin"), std::string::npos) << f.output;
}

TEST(TrainGpt, BadDataAndModelCombinationsAreRejected) {
  Finished f = run_command({kCohort, "train", "--model", "gpt", "--dataset", "fashion-mnist"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("--dataset text or tokens"), std::string::npos) << f.output;
  f = run_command({kCohort, "train", "--model", "gpt", "--dataset", "tokens"});
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("--dataset tokens needs --data-file"), std::string::npos) << f.output;
  f = run_command({kCohort, "train", "--model", "gpt", "--n-head", "3"});
  EXPECT_NE(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("n_head"), std::string::npos) << f.output;
}

}  // namespace
}  // namespace cohort::test
