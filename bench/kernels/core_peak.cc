#include "bench/kernels/core_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double measure_clock_ghz() {
  double best = 0;
  for (int run = 0; run < kBestOf; ++run) {
    int64_t n = 200'000, x = 0;
    const auto t0 = Clock::now();
    asm volatile(
        "1:\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "dec %1\n\tjnz 1b\n"
        : "+r"(x), "+r"(n));
    best = std::max(best, 200'000.0 * 16 / seconds_since(t0) * 1e-9);
  }
  return best;
}

double cpuinfo_mhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str());
  return 0;
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Measured fp32 FLOP/s of one core on independent chains in the ISA's widest
// vectors, written in assembly so that the accumulators stay in registers:
// 12 FMA chains (covers latency 4-5 x 2 units) for AVX2 and AVX-512; for the
// baseline (x86-64-v2 has no FMA) 6 multiply and 6 add chains.
constexpr int64_t kFmaSteps = 100'000;

// clang-format off
// One step of chain k: acc_k = 0 * 0 + acc_k (the values never change).
#define COHORT_FMA(op, r, k) op " %%" r "12, %%" r "13, %%" r #k "\n\t"
#define COHORT_FMA12(op, r)                                                           \
  COHORT_FMA(op, r, 0) COHORT_FMA(op, r, 1) COHORT_FMA(op, r, 2) COHORT_FMA(op, r, 3) \
  COHORT_FMA(op, r, 4) COHORT_FMA(op, r, 5) COHORT_FMA(op, r, 6) COHORT_FMA(op, r, 7) \
  COHORT_FMA(op, r, 8) COHORT_FMA(op, r, 9) COHORT_FMA(op, r, 10) COHORT_FMA(op, r, 11)
// Zeroes xmm k (garbage could hold denormals, which are slow); the VEX loops
// start with vzeroall instead.
#define COHORT_ZERO(k) "xorps %%xmm" #k ", %%xmm" #k "\n\t"
#define COHORT_ZERO13                                                               \
  COHORT_ZERO(0) COHORT_ZERO(1) COHORT_ZERO(2) COHORT_ZERO(3) COHORT_ZERO(4)        \
  COHORT_ZERO(5) COHORT_ZERO(6) COHORT_ZERO(7) COHORT_ZERO(8) COHORT_ZERO(9)        \
  COHORT_ZERO(10) COHORT_ZERO(11) COHORT_ZERO(12)
#define COHORT_CLOBBER16                                                            \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",   \
  "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
// clang-format on

double fma_loop(cohort::KernelPath path) {
  int64_t n = kFmaSteps;
  const auto t0 = Clock::now();
  double flop_per_step;
  if (path == cohort::KernelPath::kAvx512) {
    asm volatile(
        "vzeroall\n\t"
        "1:\n\t" COHORT_FMA12("vfmadd231ps", "zmm") "dec %0\n\tjnz 1b\n\tvzeroupper\n"
        : "+r"(n)
        :
        : COHORT_CLOBBER16);
    flop_per_step = 12.0 * 16 * 2;
  } else if (path == cohort::KernelPath::kAvx2) {
    asm volatile(
        "vzeroall\n\t"
        "1:\n\t" COHORT_FMA12("vfmadd231ps", "ymm") "dec %0\n\tjnz 1b\n\tvzeroupper\n"
        : "+r"(n)
        :
        : COHORT_CLOBBER16);
    flop_per_step = 12.0 * 8 * 2;
  } else {
    asm volatile(COHORT_ZERO13
                 "1:\n\t"
                 "mulps %%xmm12, %%xmm0\n\taddps %%xmm12, %%xmm1\n\tmulps %%xmm12, %%xmm2\n\t"
                 "addps %%xmm12, %%xmm3\n\tmulps %%xmm12, %%xmm4\n\taddps %%xmm12, %%xmm5\n\t"
                 "mulps %%xmm12, %%xmm6\n\taddps %%xmm12, %%xmm7\n\tmulps %%xmm12, %%xmm8\n\t"
                 "addps %%xmm12, %%xmm9\n\tmulps %%xmm12, %%xmm10\n\taddps %%xmm12, %%xmm11\n\t"
                 "dec %0\n\tjnz 1b\n"
                 : "+r"(n)
                 :
                 : COHORT_CLOBBER16);
    flop_per_step = 12.0 * 4;
  }
  return kFmaSteps * flop_per_step / seconds_since(t0);
}

double dpbf16_loop() {
  int64_t n = kFmaSteps;
  const auto t0 = Clock::now();
  asm volatile(
      "vzeroall\n\t"
      "1:\n\t" COHORT_FMA12("vdpbf16ps", "zmm") "dec %0\n\tjnz 1b\n\tvzeroupper\n"
      : "+r"(n)
      :
      : COHORT_CLOBBER16);
  // 16 lanes, each two products and two additions.
  return kFmaSteps * 12.0 * 16 * 4 / seconds_since(t0);
}

namespace {

// Best of kBestOf runs of `loop` on one core, and summed over `threads` cores
// running together (every thread waits at a counter before each run, so that
// the runs overlap).
void measure_loop(int threads, double (*loop)(KernelPath), KernelPath path, double& per_core,
                  double& all_cores) {
  per_core = all_cores = 0;
  for (int run = 0; run < kBestOf; ++run) per_core = std::max(per_core, loop(path));
  std::atomic<int> arrived{0};
  std::vector<double> best(threads, 0.0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int run = 0; run < kBestOf; ++run) {
        arrived.fetch_add(1);
        while (arrived.load() < (run + 1) * threads) std::this_thread::yield();
        best[t] = std::max(best[t], loop(path));
      }
    });
  for (auto& th : pool) th.join();
  for (double b : best) all_cores += b;
}

}  // namespace

FmaPeak measure_fma_peak(int threads) {
  FmaPeak peak;
  peak.path = cohort::best_kernel_path();
  peak.threads = std::max(threads, 1);
  measure_loop(peak.threads, &fma_loop, peak.path, peak.per_core, peak.all_cores);
  return peak;
}

FmaPeak measure_bf16_peak(int threads) {
  FmaPeak peak;
  peak.threads = std::max(threads, 1);
  if (!cohort::cpu_features().avx512_bf16) return peak;
  peak.path = cohort::KernelPath::kAvx512;
  measure_loop(
      peak.threads, [](KernelPath) { return dpbf16_loop(); }, peak.path, peak.per_core,
      peak.all_cores);
  return peak;
}

}  // namespace cohort::bench
