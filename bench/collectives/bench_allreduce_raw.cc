// bench_allreduce_raw: all_reduce (float32, sum) straight on the collectives
// layer (no ProcessGroup), ranks started by fork on this host, bootstrapped
// through a FileStore. Prints, per size, the median time of one all_reduce
// on rank 0, algbw = bytes / time and busbw = algbw * 2(n-1)/n (nccl-tests),
// the fastest iteration, the median of each iteration's slowest rank (the
// statistic of `cohort bench collectives` and mpi_allreduce.cc), the largest
// of the ranks' own medians (their rank_median_us), plus single-thread
// memcpy bandwidth as the physical limit.
//
//   bench_allreduce_raw [--nproc 2] [--min 8] [--max 67108864] [--algo ring|direct]
//                       [--transport auto|tcp] [--iters-scale 1.0]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cohort/collectives/communicator.h"
#include "cohort/rendezvous/file_store.h"

using namespace cohort;
using namespace cohort::collectives;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int nproc = 2;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  std::string algo;
  std::string transport = "auto";
  double iters_scale = 1.0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--nproc")
      a.nproc = std::stoi(v);
    else if (k == "--min")
      a.min_bytes = std::stoull(v);
    else if (k == "--max")
      a.max_bytes = std::stoull(v);
    else if (k == "--algo")
      a.algo = v;
    else if (k == "--transport")
      a.transport = v;
    else if (k == "--iters-scale")
      a.iters_scale = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

int iterations(size_t bytes, double scale) {
  double it = 4e8 / static_cast<double>(bytes + 2000) * scale;
  return static_cast<int>(std::clamp(it, 5.0, 20000.0));
}

double memcpy_gbps() {
  size_t n = size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 0);
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    auto s = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    t.push_back(std::chrono::duration<double>(Clock::now() - s).count());
    a[static_cast<size_t>(i)] = b[static_cast<size_t>(i) + 1];
  }
  std::sort(t.begin(), t.end());
  return static_cast<double>(n) / t[t.size() / 2] / 1e9;
}

void rank_main(int rank, const Args& a, const std::string& store_path) {
  rendezvous::FileStore store(store_path, std::chrono::seconds(60));
  CommunicatorOptions o;
  o.name = "bench";
  o.transport = a.transport == "tcp" ? TransportKind::kTcp : TransportKind::kAuto;
  o.tuning.algorithms.set(OpKind::kAllReduce, parse_algo(OpKind::kAllReduce, a.algo, "--algo"));
  auto comm = Communicator::create(store, rank, a.nproc, o);
  if (rank == 0) {
    std::printf("# all_reduce float32 sum, %d ranks, transport %s, algo %s\n", a.nproc,
                comm->size() > 1 ? comm->transport_name(1).c_str() : "self",
                a.algo.empty() ? "auto" : a.algo.c_str());
    std::printf("%12s %8s %12s %12s %12s %12s %12s %12s %12s\n", "bytes", "iters", "time_us",
                "algbw_GB/s", "busbw_GB/s", "min_us", "busbw@min", "slowest_us", "rank_med_us");
  }
  std::vector<float> buf(a.max_bytes / 4 + 1, 1.0f);
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 2) {
    size_t count = bytes / 4;
    int iters = iterations(bytes, a.iters_scale);
    int warm = std::max(2, iters / 10);
    for (int i = 0; i < warm; ++i)
      comm->all_reduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    comm->barrier();
    std::vector<double> t(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      auto s = Clock::now();
      comm->all_reduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      t[static_cast<size_t>(i)] = std::chrono::duration<double>(Clock::now() - s).count();
    }
    // Each iteration as long as its slowest rank, as cohort bench collectives
    // and mpi_allreduce.cc take it.
    std::vector<double> slowest = t;
    comm->all_reduce(slowest.data(), slowest.size(), DataType::kFloat64, ReduceOp::kMax);
    std::sort(slowest.begin(), slowest.end());
    std::sort(t.begin(), t.end());
    double med = t[t.size() / 2];
    double rank_median = med;  // the largest of the ranks' own medians
    comm->all_reduce(&rank_median, 1, DataType::kFloat64, ReduceOp::kMax);
    double algbw = static_cast<double>(bytes) / med / 1e9;
    double busbw = algbw * 2.0 * (a.nproc - 1) / a.nproc;
    if (rank == 0) {
      // The fastest iteration shows what the code does when both ranks had a
      // CPU (the median also shows what sharing the machine cost).
      double best = t.front();
      double busbw_best = static_cast<double>(bytes) / best / 1e9 * 2.0 * (a.nproc - 1) / a.nproc;
      std::printf("%12zu %8d %12.2f %12.3f %12.3f %12.2f %12.3f %12.3f %12.3f\n", bytes, iters,
                  med * 1e6, algbw, busbw, best * 1e6, busbw_best,
                  slowest[slowest.size() / 2] * 1e6, rank_median * 1e6);
      std::fflush(stdout);
    }
  }
  comm->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  std::printf("# single-thread memcpy 64 MiB: %.2f GB/s\n", memcpy_gbps());
  std::fflush(stdout);
  std::string path = "/tmp/cohort-bench-allreduce-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  std::vector<pid_t> pids;
  for (int r = 0; r < a.nproc; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        rank_main(r, a, path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  ::unlink(path.c_str());
  return rc;
}
