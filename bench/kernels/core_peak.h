// What one core of this machine can do, for the kernel benchmarks' "% of
// peak": its clock under load, a measured FMA (or mul + add) rate per ISA,
// and the load average to print beside the figures. x86-64 only.
#pragma once

#include <string>

#include "cohort/base/cpu.h"

namespace cohort::bench {

// Runs each measurement is the best of.
constexpr int kBestOf = 40;

// Clock of this core under load, from a chain of dependent integer adds (one
// per cycle on every x86-64 core of the last 15 years): best of kBestOf runs
// of about 1 ms (short, so that some run sees no preemption on a busy machine).
double measure_clock_ghz();

// /proc/cpuinfo's "cpu MHz" of the first CPU (0 when absent).
double cpuinfo_mhz();

// /proc/loadavg's three load averages.
std::string loadavg();

// Measured fp32 FLOP/s of one core on independent chains in the widest
// vectors of `path`'s ISA.
double fma_loop(KernelPath path);

// The machine's fp32 peak as measured (the denominator of the GPT bench's model
// FLOPs utilisation): fma_loop on the best kernel path this CPU runs, best of
// kBestOf runs, on one core and on `threads` cores at once (one std::thread
// each, every run started together so that the runs overlap; the sum of each
// thread's best). Takes about 0.1 s.
struct FmaPeak {
  KernelPath path = KernelPath::kBaseline;
  int threads = 1;
  double per_core = 0;   // FLOP/s of one core running alone
  double all_cores = 0;  // FLOP/s of `threads` cores running together
};
FmaPeak measure_fma_peak(int threads);

// Measured bf16 FLOP/s of one core on 12 independent vdpbf16ps zmm chains
// (each lane: two products and two additions). AVX512-BF16 CPUs only.
double dpbf16_loop();
// The same as measure_fma_peak for dpbf16_loop; zeros (path kBaseline) on a
// CPU without avx512_bf16.
FmaPeak measure_bf16_peak(int threads);

}  // namespace cohort::bench
