// bench/dp: the all_reduce that ends a DDP backward, in isolation. Two ranks
// (cohort::spawn, pinned) repeat: 3 ms of work on the calling thread, then a
// blocking all_reduce (average) of `floats` float32 (default 111110 = Net's
// gradients, 444 KB). Modes: spin (busy loop), matmul (256x256 matmuls),
// sleep (the thread sleeps instead of working). Measured 2026-11-22 on the
// 2-core host: 6-7 ms per all_reduce after spin or matmul, 60-75 us after
// sleep, and 6.6 ms for 10000 floats after spin, with the host oversubscribed
// by other jobs (load average 6 on 2 cores). A likely cause is the scheduler,
// not the bytes: a rank that has used its CPU share and then blocks in the
// collective waits a time slice behind the other jobs for each wake-up. This
// is what slows DDP's single-bucket Net steps there (docs/strategies.md).
//
//   build-*/bench/dp/bench_allreduce_after_compute [spin|matmul|sleep] [floats]
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cohort/autograd/ops.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "spin";
  int64_t floats = argc > 2 ? std::stoll(argv[2]) : 111110;
  if (mode != "spin" && mode != "matmul" && mode != "sleep") {
    std::fprintf(stderr, "usage: bench_allreduce_after_compute [spin|matmul|sleep] [floats]\n");
    return 2;
  }
  try {
    spawn(
        [&](int rank) {
          auto pg = distributed::init_process_group("native", "env://");
          Tensor t = Tensor::ones({floats});
          Tensor a = Tensor::ones({256, 256});
          double total_us = 0;
          const int warmup = 10, iters = 50;
          for (int i = 0; i < warmup + iters; ++i) {
            auto end = Clock::now() + std::chrono::milliseconds(3);
            if (mode == "spin") {
              while (Clock::now() < end) {
              }
            } else if (mode == "matmul") {
              while (Clock::now() < end) matmul(a, a);
            } else {
              std::this_thread::sleep_until(end);
            }
            auto t0 = Clock::now();
            pg->all_reduce(t, {.op = distributed::ReduceOp::kAvg});
            if (i >= warmup)
              total_us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          }
          std::printf("rank %d: all_reduce of %ld floats after 3 ms of %s: %.1f us\n", rank,
                      static_cast<long>(floats), mode.c_str(), total_us / iters);
          distributed::destroy_process_group(pg);
        },
        2);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce_after_compute: %s\n", e.what());
    return 1;
  }
}
