// What the flight recorder and the header check cost on the smallest op: 2
// processes (one core each when the host has two) doing 8-byte all_reduces
// on a communicator with the recorder on (2048 entries) and one with it off,
// in alternating rounds of the same run; and the header work per op (build
// the 32-byte header, compare it with the peer's), timed directly.
//
//   bench_flight_recorder [--ops 20000] [--rounds 10]
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/collectives/communicator.h"
#include "cohort/collectives/flight_recorder.h"
#include "cohort/collectives/wire.h"
#include "cohort/rendezvous/file_store.h"

using namespace cohort;
using namespace cohort::collectives;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The receiver's per-op header check: compare the 32 bytes that arrived with
// the header it built for its own call (which it sends anyway).
double header_check_ns() {
  OpDesc d{OpKind::kAllReduce};
  d.dtype = DataType::kFloat32;
  d.count = 2;
  WireHeader want = to_wire(d), got = to_wire(d);
  volatile int mismatches = 0;
  const int n = 50'000'000;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    want.seq = static_cast<uint64_t>(i);
    got.seq = static_cast<uint64_t>(i);
    asm volatile("" : : "r"(&got), "r"(&want) : "memory");
    mismatches = mismatches + (std::memcmp(&want, &got, sizeof(WireHeader)) != 0);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

// The recorder's own work per op (start + finish), timed directly: the
// end-to-end difference of two communicators is within their run-to-run noise.
double recorder_ns() {
  FlightRecorder r(2048);
  OpDesc d{OpKind::kAllReduce};
  d.dtype = DataType::kFloat32;
  d.count = 2;
  const int n = 50'000'000;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    d.seq = static_cast<uint64_t>(i);
    const size_t slot = r.start(d);
    asm volatile("" : : "r"(slot) : "memory");
    r.finish(slot, OpState::kCompleted);
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  int ops = 20000, rounds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ops") == 0) ops = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  const std::string path = "/tmp/cohort-bench-flight-" + std::to_string(::getpid());
  int pipefd[2];
  if (::pipe(pipefd) != 0) return 1;
  std::vector<pid_t> kids;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(rank % std::max(1u, std::thread::hardware_concurrency()), &set);
      ::sched_setaffinity(0, sizeof(set), &set);
      rendezvous::FileStore store(path);
      CommunicatorOptions on, off;
      on.name = "on";
      off.name = "off";
      off.flight_recorder_entries = 0;
      auto comm_on = Communicator::create(store, rank, 2, on);
      auto comm_off = Communicator::create(store, rank, 2, off);
      float x[2] = {1, 2};
      std::vector<double> t_on, t_off;
      for (int r = 0; r < 2 * rounds; ++r) {
        Communicator& c = r % 2 == 0 ? *comm_on : *comm_off;
        c.barrier();
        const auto t0 = Clock::now();
        for (int i = 0; i < ops; ++i) c.all_reduce(x, 2, DataType::kFloat32, ReduceOp::kSum);
        const double us =
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / ops;
        (r % 2 == 0 ? t_on : t_off).push_back(us);
      }
      if (rank == 0) {
        double res[2] = {median(t_on), median(t_off)};
        (void)::write(pipefd[1], res, sizeof(res));
      }
      std::_Exit(0);
    }
    kids.push_back(pid);
  }
  double res[2] = {0, 0};
  (void)::read(pipefd[0], res, sizeof(res));
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  ::unlink(path.c_str());
  const double hdr = header_check_ns();
  std::printf(
      "bench_flight_recorder: %s, %u cores; 2 processes, 8-byte all_reduce, %d ops x %d "
      "rounds each\n",
      cpu_features().model.c_str(), std::thread::hardware_concurrency(), ops, rounds);
  std::printf("recorder: %.3f us/op on, %.3f us/op off, overhead %.2f%%\n", res[0], res[1],
              100.0 * (res[0] - res[1]) / res[1]);
  std::printf("header check: %.1f ns/op per peer (%.3f%% of the op)\n", hdr,
              100.0 * hdr / (res[1] * 1000.0));
  const double rec = recorder_ns();
  std::printf("recorder alone: %.1f ns/op (%.3f%% of the op)\n", rec,
              100.0 * rec / (res[1] * 1000.0));
  return 0;
}
