// bench_text_windows: the input pipeline of a GPT run alone -- loading the
// default corpus (Debian's fortunes, docs/data.md), reading an llm.c token
// shard, and drawing next-token windows ([B, T] int64 input and target) with
// WindowSampler and EvalWindows -- and nanoGPT's get_batch in PyTorch 1.13
// (bench/data/torch_get_batch.py) on the same corpus when /usr/bin/python3
// has torch.
//   bench_text_windows [--batch-size B] [--block-size T] [--steps N] [--no-peer]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cohort/data/default_corpus.h"
#include "cohort/data/token_shard.h"
#include "cohort/data/window_sampler.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The median of `reps` timings of fn().
template <typename F>
static double median_seconds(int reps, F&& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  int64_t batch = 16, block = 128, steps = 20000;
  bool peer = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch-size") && i + 1 < argc)
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--block-size") && i + 1 < argc)
      block = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-peer"))
      peer = false;
    else {
      std::fprintf(stderr, "usage: %s [--batch-size B] [--block-size T] [--steps N] [--no-peer]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    data::TokenCorpus corpus;
    const double load = median_seconds(5, [&] { corpus = data::load_default_corpus(); });
    std::printf("cohort  load default corpus (%s): %.1f ms (median of 5)\n",
                corpus.description.c_str(), 1e3 * load);

    // An llm.c shard of 10 M tokens, written and read back.
    const std::string shard = (std::filesystem::temp_directory_path() /
                               ("cohort_bench_" + std::to_string(::getpid()) + "_train_000001.bin"))
                                  .string();
    std::vector<uint16_t> tokens(10'000'000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7919 % 50257);
    const double write = median_seconds(3, [&] { data::write_token_shard(shard, tokens); });
    size_t got = 0;
    const double read =
        median_seconds(5, [&] { got = data::read_token_shard(shard, 50257).size(); });
    std::filesystem::remove(shard);
    std::printf(
        "cohort  token shard of %zu tokens (20 MB): write %.1f ms (fsync'd), read %.1f ms "
        "(%.2f GB/s, vocab checked)\n",
        got, 1e3 * write, 1e3 * read, 2e-9 * static_cast<double>(got) / read);

    data::WindowSampler sampler(corpus.train, {.batch_size = batch, .block_size = block});
    int64_t check = 0;
    for (int i = 0; i < 100; ++i) check += sampler.next().input.data_ptr<int64_t>()[0];  // warm
    auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) check += sampler.next().target.data_ptr<int64_t>()[0];
    double s = seconds_since(t0);
    std::printf(
        "cohort  WindowSampler B %ld x T %ld: %.2f us/batch, %.0f windows/s (%ld batches, "
        "check %ld)\n",
        static_cast<long>(batch), static_cast<long>(block), 1e6 * s / steps,
        static_cast<double>(steps * batch) / s, static_cast<long>(steps), static_cast<long>(check));
    t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) check += static_cast<int64_t>(sampler.offsets(i)[0]);
    s = seconds_since(t0);
    std::printf("cohort    of which drawing the offsets (mt19937 seeded per step): %.2f us/batch\n",
                1e6 * s / steps);

    data::EvalWindows eval(corpus.val, {.batch_size = batch, .block_size = block});
    int64_t windows = 0;
    for (int rep = 0; rep < 2; ++rep) {  // the first pass warms caches
      windows = 0;
      t0 = Clock::now();
      for (const data::Batch& b : eval) windows += b.size();
      s = seconds_since(t0);
    }
    std::printf(
        "cohort  EvalWindows over the validation split: %ld windows in %.2f ms, %.2f "
        "us/batch\n",
        static_cast<long>(windows), 1e3 * s, 1e6 * s / eval.num_batches());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_text_windows: %s\n", e.what());
    return 1;
  }
  if (peer && std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0) {
    std::string cmd = std::string("/usr/bin/python3 ") + COHORT_BENCH_GET_BATCH_PEER + " " +
                      data::kDefaultCorpusDir + " " + std::to_string(batch) + " " +
                      std::to_string(block) + " " + std::to_string(std::min<int64_t>(steps, 5000));
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "peer failed: %s\n", cmd.c_str());
  }
  return 0;
}
