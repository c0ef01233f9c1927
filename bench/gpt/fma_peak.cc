// Prints this machine's measured fp32 peak (and bf16 peak: vdpbf16ps, 0 without
// AVX512-BF16) as one JSON line (the MFU
// denominator of bench/gpt/run.sh): bench::measure_fma_peak on 1..N cores,
// the FMA loop of bench/kernels/core_peak.cc on the best kernel path.
// Usage: bench_fma_peak [threads]   (default: the online CPUs)
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "bench/kernels/core_peak.h"
#include "cohort/base/cpu.h"

int main(int argc, char** argv) {
  const int threads =
      argc > 1 ? std::atoi(argv[1]) : static_cast<int>(std::thread::hardware_concurrency());
  const cohort::bench::FmaPeak peak = cohort::bench::measure_fma_peak(threads);
  const cohort::bench::FmaPeak bf16 = cohort::bench::measure_bf16_peak(threads);
  std::printf(
      "{\"cpu\": \"%s\", \"path\": \"%s\", \"threads\": %d, \"gflops_per_core\": %.1f, "
      "\"gflops_all\": %.1f, \"bf16_gflops_per_core\": %.1f, \"bf16_gflops_all\": %.1f, "
      "\"clock_ghz\": %.2f, \"load\": \"%s\"}\n",
      cohort::cpu_features().model.c_str(), cohort::kernel_path_name(peak.path), peak.threads,
      peak.per_core * 1e-9, peak.all_cores * 1e-9, bf16.per_core * 1e-9, bf16.all_cores * 1e-9,
      cohort::bench::measure_clock_ghz(), cohort::bench::loadavg().c_str());
  return 0;
}
