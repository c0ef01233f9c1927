// bench/dp: data parallelism on one machine, in one run. Net training steps
// (global batch 64, SGD lr 0.01 momentum 0.9, synthetic data) as
//   1. one replica, one process, all cores (intra-op threads),
//   2. DataParallel, 2 replicas on threads, cores split between them,
//   3. DistributedDataParallel, 2 processes (cohort::spawn, cores split, batch 32 each),
//   4. PyTorch (bench/dp/torch_dp.py): the module itself, nn.DataParallel on
//      this CPU-only machine (which cannot replicate: it says why), and 2 CPU
//      replicas on Python threads;
// printing step time, samples/s and the ratios. The machine is shared: the
// configurations are run in a rotating order for --rounds rounds and the
// best round of each is kept. "DataParallel (1)" is the wrapper around a
// single replica: its overhead.
//
//   build-*/bench/dp/bench_dp [--steps 30] [--rounds 3] [--bucket-mb 25] [--no-torch]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "cohort/base/parallel.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/data_parallel.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int steps = 30;
  int warmup = 3;
  int rounds = 3;
  int64_t batch = 64;
  bool torch = true;
  double bucket_mb = 25.0;
};

std::vector<std::pair<Tensor, Tensor>> make_batches(int64_t batch) {
  Generator gen(0);
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int i = 0; i < 8; ++i)
    out.emplace_back(rand({batch, 1, 28, 28}, gen), randint(0, 10, {batch}, gen));
  return out;
}

// Seconds per step of `step(x, y)` over args.steps steps after warm-up.
template <typename Step>
double time_steps(const Args& args, const std::vector<std::pair<Tensor, Tensor>>& data,
                  Step&& step) {
  for (int i = 0; i < args.warmup; ++i)
    step(data[i % data.size()].first, data[i % data.size()].second);
  auto t0 = Clock::now();
  for (int i = 0; i < args.steps; ++i)
    step(data[i % data.size()].first, data[i % data.size()].second);
  return std::chrono::duration<double>(Clock::now() - t0).count() / args.steps;
}

double run_single(const Args& args, int threads) {
  ThreadBudgetGuard budget(threads);
  Generator gen(1);
  auto model = std::make_shared<nn::Net>(gen);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  auto data = make_batches(args.batch);
  return time_steps(args, data, [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    nll_loss(model->forward(x), y).backward();
    opt.step();
  });
}

double run_dp(const Args& args, int threads, int replicas) {
  ThreadBudgetGuard budget(threads);
  Generator gen(1);
  auto model = std::make_shared<nn::Net>(gen);
  parallel::DataParallel dp(model, replicas);
  optim::SGD opt(dp.parameters(), {.lr = 0.01, .momentum = 0.9});
  auto data = make_batches(args.batch);
  return time_steps(args, data, [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    nll_loss(dp.forward(x), y).backward();
    opt.step();
  });
}

// Rank 0 writes its seconds per step to `result`.
double run_ddp(const Args& args, int nprocs) {
  std::string result = "/tmp/cohort-bench-dp-" + std::to_string(::getpid());
  spawn(
      [&](int rank) {
        auto pg = distributed::init_process_group("native", "env://");
        Generator gen(1);
        auto model = std::make_shared<nn::Net>(gen);
        parallel::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = args.bucket_mb});
        optim::SGD opt(ddp.parameters(), {.lr = 0.01, .momentum = 0.9});
        const int64_t local = args.batch / pg->size();
        auto data = make_batches(args.batch);
        for (auto& [x, y] : data) {
          x = x.narrow(0, rank * local, local).contiguous();
          y = y.narrow(0, rank * local, local).contiguous();
        }
        pg->barrier();
        double sec = time_steps(args, data, [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          nll_loss(ddp.forward(x), y).backward();
          opt.step();
        });
        pg->barrier();
        if (rank == 0) std::ofstream(result) << sec << "\n";
        distributed::destroy_process_group(pg);
      },
      nprocs);
  double sec = 0;
  std::ifstream(result) >> sec;
  ::unlink(result.c_str());
  return sec;
}

struct TorchRow {
  double step_ms = 0;
  std::string note;
};

// Runs torch_dp.py and parses its JSON lines (mode, step_ms, note) by hand.
std::map<std::string, TorchRow> run_torch(const Args& args, int threads, std::string& error) {
  std::string cmd = "/usr/bin/python3 " COHORT_BENCH_DP_DIR "/torch_dp.py --threads " +
                    std::to_string(threads) + " --steps " + std::to_string(args.steps) +
                    " --warmup " + std::to_string(args.warmup) + " --batch " +
                    std::to_string(args.batch) + " 2>&1";
  std::map<std::string, TorchRow> rows;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    error = "popen failed";
    return rows;
  }
  char line[4096];
  std::string all;
  auto field = [](const std::string& s, const std::string& key) {
    size_t k = s.find("\"" + key + "\": ");
    if (k == std::string::npos) return std::string();
    k += key.size() + 4;
    if (s[k] == '"') {
      size_t e = s.find('"', k + 1);
      return s.substr(k + 1, e - k - 1);
    }
    size_t e = s.find_first_of(",}", k);
    return s.substr(k, e - k);
  };
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    all += s;
    std::string mode = field(s, "mode");
    if (mode.empty()) continue;
    rows[mode] = TorchRow{std::stod(field(s, "step_ms")), field(s, "note")};
  }
  int rc = ::pclose(p);
  if (rc != 0) error = "torch_dp.py failed: " + all.substr(all.size() > 600 ? all.size() - 600 : 0);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  bench::Args cli(argc, argv,
                  "bench_dp [--steps N] [--rounds R] [--batch B] [--bucket-mb M] [--no-torch]");
  while (cli.next()) {
    if (cli.is("--steps")) {
      args.steps = static_cast<int>(cli.integer());
    } else if (cli.is("--rounds")) {
      args.rounds = static_cast<int>(cli.integer());
    } else if (cli.is("--batch")) {
      args.batch = cli.integer();
    } else if (cli.is("--no-torch")) {
      args.torch = false;
    } else if (cli.is("--bucket-mb")) {
      args.bucket_mb = cli.real();
    } else {
      cli.unknown();
    }
  }
  try {
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    std::printf(
        "bench_dp: Net, global batch %ld, %d steps (+%d warm-up), %d cores, best of %d rounds\n",
        static_cast<long>(args.batch), args.steps, args.warmup, cores, args.rounds);
    std::fflush(stdout);
    double single = 1e9, dp = 1e9, ddp = 1e9, dp1 = 1e9;
    for (int r = 0; r < args.rounds; ++r) {
      // DDP first in each round: spawn forks, best done before this process starts threads.
      ddp = std::min(ddp, run_ddp(args, 2));
      // The in-process configurations in a rotating order, so none always runs first.
      for (int k = 0; k < 3; ++k) {
        switch ((k + r) % 3) {
          case 0:
            single = std::min(single, run_single(args, cores));
            break;
          case 1:
            dp = std::min(dp, run_dp(args, cores, 2));
            break;
          default:
            dp1 = std::min(dp1, run_dp(args, cores, 1));
            break;
        }
      }
    }
    auto row = [&](const char* name, const std::string& how, double sec) {
      std::printf("  %-28s %-34s %8.1f ms/step %8.0f samples/s  x%.2f vs one replica\n", name,
                  how.c_str(), sec * 1e3, args.batch / sec, single / sec);
    };
    row("cohort one replica", std::to_string(cores) + " threads", single);
    row("cohort DataParallel",
        "2 replicas x " + std::to_string(std::max(1, cores / 2)) + " threads", dp);
    row("cohort DataParallel (1)", "1 replica x " + std::to_string(cores) + " threads", dp1);
    row("cohort DDP", "2 processes x " + std::to_string(std::max(1, cores / 2)) + " threads", ddp);
    if (args.torch) {
      std::string error;
      auto t = run_torch(args, cores, error);
      if (!error.empty()) std::printf("  PyTorch: %s\n", error.c_str());
      for (const char* mode : {"single", "dp-cpu", "single-half", "threads"}) {
        auto it = t.find(mode);
        if (it == t.end()) continue;
        std::string name = std::string("torch ") + mode;
        row(name.c_str(), "", it->second.step_ms / 1e3);
        std::printf("      (%s)\n", it->second.note.c_str());
      }
      if (t.count("single"))
        std::printf("  cohort DataParallel / torch single (time): %.2f; / torch threads: %.2f\n",
                    dp / (t["single"].step_ms / 1e3),
                    t.count("threads") ? dp / (t["threads"].step_ms / 1e3) : 0.0);
    }
    std::printf("  DataParallel(2) / one replica (time): %.2f;  DDP(2) / one replica: %.2f\n",
                dp / single, ddp / single);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dp: %s\n", e.what());
    return 1;
  }
}
