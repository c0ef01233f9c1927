// How long a checkpoint blocks the training thread: a synchronous
// save_checkpoint (the whole write, fsyncs and commit) against a background
// one (AsyncCheckpointWriter::save: the copy to host memory only), for the
// state of GPT-2 small (124M parameters, AdamW's two moments: about 1.5 GB)
// or the reference GPT (--small). Also: the background write's own time, a
// plain copy of the same bytes (what the background save cannot beat), and
// the CPU. Each figure is the median of --repeats saves (the first async
// save allocates its staging buffers, the later ones reuse them: both
// shown).
//
//   bench_checkpoint [--small] [--repeats N] [--dir D] [--threads N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/parallel.h"
#include "cohort/checkpoint/async_checkpoint.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/core/random.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/adam.h"

namespace {

using namespace cohort;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  bool small = false;
  int64_t repeats = 3, threads = 0;
  std::string dir =
      (fs::temp_directory_path() / ("cohort_bench_ckpt_" + std::to_string(getpid()))).string();
  bench::Args args(argc, argv, "bench_checkpoint [--small] [--repeats N] [--dir D] [--threads N]");
  while (args.next()) {
    if (args.is("--small")) {
      small = true;
    } else if (args.is("--repeats")) {
      repeats = std::max<int64_t>(1, args.integer());
    } else if (args.is("--dir")) {
      dir = args.value();
    } else if (args.is("--threads")) {
      threads = args.integer();
    } else {
      args.unknown();
    }
  }
  if (threads > 0) set_num_threads(static_cast<int>(threads));

  // The state: a GPT and AdamW after one step (so both moments exist).
  nn::GPTConfig config = small ? nn::GPTConfig::reference() : nn::GPTConfig::gpt2();
  Generator gen(1);
  nn::GPT model(config, gen);
  optim::AdamW opt(model.parameters(), {.lr = 1e-4});
  {
    Tensor idx = randint(0, config.vocab_size, {1, 8}, gen);
    opt.zero_grad();
    model.forward(idx, idx).backward();
    opt.step();
    opt.zero_grad();  // the gradients are not part of a checkpoint
  }
  uint64_t bytes = 0;
  for (const auto& [n, t] : model.state_dict()) bytes += t.nbytes();
  for (const auto& [n, t] : opt.state_dict()) bytes += t.nbytes();

  fs::remove_all(dir);
  const std::string sync_root = dir + "/sync", async_root = dir + "/async";
  checkpoint::TrainingState st;
  std::vector<double> sync_s, copy_s, first_blocked, blocked, staging, write_s;
  for (int64_t r = 0; r < repeats; ++r) {
    st.step = r + 1;
    auto t0 = Clock::now();
    checkpoint::save_checkpoint(sync_root, model, &opt, st, {.keep_last = 1});
    sync_s.push_back(since(t0));

    // A plain copy of every tensor: the floor of any copy to host memory.
    t0 = Clock::now();
    {
      std::vector<Tensor> copies;
      for (const auto& [n, t] : model.state_dict()) copies.push_back(t.clone());
      for (const auto& [n, t] : opt.state_dict()) copies.push_back(t.clone());
      copy_s.push_back(since(t0));
    }
  }
  {
    checkpoint::AsyncCheckpointWriter writer;
    for (int64_t r = 0; r <= repeats; ++r) {
      st.step = r + 1;
      writer.save(async_root, model, &opt, st, {.keep_last = 1});
      const checkpoint::AsyncCheckpointStats s = writer.last_stats();
      writer.wait();  // so the next save's blocked time holds no wait for this one
      (r == 0 ? first_blocked : blocked).push_back(s.blocked_seconds);
      if (r > 0) staging.push_back(s.staging_seconds);
      write_s.push_back(writer.last_stats().write_seconds);
    }
  }
  fs::remove_all(dir);

  const double sync = median(sync_s), async = median(blocked);
  std::printf("state: %s + AdamW moments, %.1f MB (%s)\n", config.str().c_str(), bytes / 1e6,
              small ? "--small" : "GPT-2 small");
  std::printf("cpu: %s, %d threads\n", cpu_model().c_str(), num_threads());
  std::printf("synchronous checkpoint, step blocked:        %8.3f s\n", sync);
  std::printf(
      "background checkpoint, step blocked:         %8.3f s (first save, fresh buffers: "
      "%.3f s)\n",
      async, first_blocked[0]);
  std::printf("  of which the copy to host memory:          %8.3f s\n", median(staging));
  std::printf("  a plain clone() of the same tensors:       %8.3f s\n", median(copy_s));
  std::printf("background write (files, fsync, commit):    %8.3f s\n", median(write_s));
  std::printf("ratio synchronous / background blocked:      %8.1f x\n",
              async > 0 ? sync / async : 0);
  std::printf("(medians of %lld saves each)\n", static_cast<long long>(repeats));
  return 0;
}
