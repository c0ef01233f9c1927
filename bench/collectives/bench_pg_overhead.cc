// bench_pg_overhead: what ProcessGroup adds to one small op. Each rank holds
// a raw Communicator and a ProcessGroup over the same peers and times a
// 4-byte all_reduce on the raw Communicator, through the ProcessGroup blocking
// (the inline path) and async_op + wait (the queued path), in alternating
// rounds (rank 0's median op time of each round; the medians over rounds).
// --nproc 1 (default): one rank, no peer and no transport, so the difference
// is the bookkeeping alone, stable even on a loaded machine. --nproc 2: two
// forked processes, each pinned to one CPU, as the latency benchmarks run.
//
//   cohort_bench_pg_overhead [--nproc 1|2] [--rounds 9] [--ops 200000]
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/collectives/communicator.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/file_store.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;
using distributed::DataType;

namespace {

struct Result {
  double raw = 0, blocking = 0, queued = 0;  // ns per op, medians over rounds
  unsigned long long inline_ops = 0, queued_ops = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result rank_main(int rank, int nproc, int rounds, int ops, const std::string& path) {
  auto store = std::make_shared<rendezvous::FileStore>(path, std::chrono::seconds(60));
  collectives::CommunicatorOptions co;
  co.name = "raw";
  auto comm = collectives::Communicator::create(*store, rank, nproc, co);
  distributed::ProcessGroupOptions po;
  po.name = "pg";
  auto pg =
      distributed::ProcessGroup::create(distributed::BackendKind::kNative, store, rank, nproc, po);
  float v = 1.0f;
  auto raw = [&] { comm->all_reduce(&v, 1, DataType::kFloat32, collectives::ReduceOp::kSum); };
  auto blocking = [&] { pg->all_reduce(&v, 1, DataType::kFloat32); };
  auto queued = [&] {
    pg->all_reduce(&v, 1, DataType::kFloat32, {}, distributed::async_op).wait();
  };
  // The median of the ops' own times: robust to preemption on a loaded host
  // (each op also pays two clock reads, alike for all three).
  std::vector<double> each(static_cast<size_t>(ops));
  auto time = [&](auto op, int n) {
    comm->barrier();
    for (int i = 0; i < n; ++i) {
      auto start = Clock::now();
      op();
      each[static_cast<size_t>(i)] =
          std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    }
    std::nth_element(each.begin(), each.begin() + n / 2, each.begin() + n);
    return each[static_cast<size_t>(n / 2)];
  };
  time(raw, ops / 10 + 1);
  time(blocking, ops / 10 + 1);
  time(queued, ops / 10 + 1);
  std::vector<double> r, b, q;
  for (int i = 0; i < rounds; ++i) {
    // Alternate the order so that drift in the machine's load falls on all three.
    if (i % 2 == 0) {
      r.push_back(time(raw, ops));
      b.push_back(time(blocking, ops));
      q.push_back(time(queued, ops));
    } else {
      q.push_back(time(queued, ops));
      b.push_back(time(blocking, ops));
      r.push_back(time(raw, ops));
    }
    if (rank == 0) {
      std::printf("%6d %10.1f %14.1f %14.1f\n", i, r.back(), b.back(), q.back());
      std::fflush(stdout);
    }
  }
  comm->barrier();
  distributed::ProcessGroupStats s = pg->stats();
  pg->destroy();
  return Result{median(r), median(b), median(q), s.ops_inline, s.ops_queued};
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 1, rounds = 9, ops = 200000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--nproc") == 0) {
      nproc = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      rounds = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--ops") == 0) {
      ops = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (nproc < 1 || nproc > 2 || rounds < 1 || ops < 1) {
    std::fprintf(stderr, "usage: cohort_bench_pg_overhead [--nproc 1|2] [--rounds N] [--ops N]\n");
    return 2;
  }
  std::printf("# %s, %u CPUs; all_reduce 4 B, %d rank(s), %d ops per round: median ns per op\n",
              cpu_features().model.c_str(), std::thread::hardware_concurrency(), nproc, ops);
  std::printf("%6s %10s %14s %14s\n", "round", "raw", "pg blocking", "pg async+wait");
  std::fflush(stdout);
  const std::string path = "/tmp/cohort-bench-pg-overhead-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  int pipefd[2];
  if (::pipe(pipefd) != 0) return 1;
  std::vector<pid_t> kids;
  for (int rank = 0; rank < nproc; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        if (nproc > 1) {
          cpu_set_t set;
          CPU_ZERO(&set);
          CPU_SET(rank % std::max(1u, std::thread::hardware_concurrency()), &set);
          ::sched_setaffinity(0, sizeof(set), &set);
        }
        Result res = rank_main(rank, nproc, rounds, ops, path);
        if (rank == 0) (void)::write(pipefd[1], &res, sizeof(res));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::_Exit(code);
    }
    kids.push_back(pid);
  }
  ::close(pipefd[1]);
  Result res;
  bool got = ::read(pipefd[0], &res, sizeof(res)) == static_cast<ssize_t>(sizeof(res));
  int rc = got ? 0 : 1;
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  ::unlink(path.c_str());
  if (!got) return rc;
  std::printf("median %10.1f %14.1f %14.1f\n", res.raw, res.blocking, res.queued);
  std::printf("ProcessGroup adds %.1f ns (blocking, inline) and %.1f ns (async_op + wait)\n",
              res.blocking - res.raw, res.queued - res.raw);
  std::printf("ops run inline %llu, queued %llu (rank 0)\n", res.inline_ops, res.queued_ops);
  return rc;
}
