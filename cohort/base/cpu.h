// The CPU cohort runs on and the kernel path it uses.
//
// Fast kernels exist per instruction set (AVX2+FMA, AVX-512) beside portable
// reference code, all in one binary: the library itself is compiled for a
// portable baseline (x86-64-v2 on x86-64) and each ISA's kernels are compiled
// for that ISA alone (see isa.h). Which set runs is one process-wide choice,
// made once from the CPU's features and changeable through set_kernel_path.
// The library reads no environment: programs apply a user's setting with
// apply_kernel_path_setting (the cohort CLI does so for COHORT_KERNELS;
// docs/kernels.md).
// Thread safety: all functions may be called from any thread; changing the
// path while kernels run on other threads is allowed but those calls may use
// either path.
// Failure: asking for a path this CPU (or this build) cannot run throws
// cohort::InvalidArgument naming the missing features; nothing is changed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cohort {

enum class KernelPath { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  std::string arch;   // "x86_64", "aarch64", ...
  std::string model;  // /proc/cpuinfo's model name, or "unknown"
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false, amx_bf16 = false;
  bool neon = false;
  // The features above that are present, by their /proc/cpuinfo names.
  std::vector<std::string> names() const;
};

// Detected once.
const CpuFeatures& cpu_features();

// CPUs this process may run on now (its sched_getaffinity mask, as `cohort
// run` pins each rank to its share; the online CPUs where the mask cannot be
// read), at least 1. Threads that poll while waiting only pay off with 2 or
// more: on one CPU the poller takes the time of the thread it waits for.
int usable_cpus();

// One step of a polling loop: tells the core that this thread spins (x86's
// pause), so a sibling thread and the memory system are not starved.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// "baseline", "avx2", "avx512".
const char* kernel_path_name(KernelPath path);
// Inverse of kernel_path_name; throws InvalidArgument naming the choices.
KernelPath parse_kernel_path(std::string_view name);

// Empty when this CPU and build can run `path`; else why not (the missing
// features, or that the build has no such kernels).
std::string kernel_path_unsupported_reason(KernelPath path);
bool kernel_path_supported(KernelPath path);
// Every path this CPU can run, baseline first.
std::vector<KernelPath> supported_kernel_paths();
// The fastest supported path.
KernelPath best_kernel_path();

// The path in use: the last one set, else the best this CPU supports.
KernelPath kernel_path();
// Forces `path` for the whole process; throws InvalidArgument when the CPU
// cannot run it.
void set_kernel_path(KernelPath path);
// A user's setting ("baseline", "avx2", "avx512", or "auto" / empty for the
// best), e.g. an environment variable's value read by a program's main:
// applies it, or throws InvalidArgument "<origin>=<value>: <why>" naming the
// choices or the features this CPU lacks.
void apply_kernel_path_setting(std::string_view value, std::string_view origin);

// The table of kernel_path() among one table's per-ISA copies (see isa.h's
// COHORT_ISA_TABLE): `avx512` or `avx2` on those paths, else `baseline`.
template <class T>
const T* kernel_table(const T* baseline, const T* avx2, const T* avx512) {
  switch (kernel_path()) {
    case KernelPath::kAvx512:
      return avx512;
    case KernelPath::kAvx2:
      return avx2;
    default:
      return baseline;
  }
}

// RAII: forces a path for a scope (tests, benchmarks) and restores the old one.
class KernelPathGuard {
 public:
  explicit KernelPathGuard(KernelPath path);
  ~KernelPathGuard();
  KernelPathGuard(const KernelPathGuard&) = delete;
  KernelPathGuard& operator=(const KernelPathGuard&) = delete;

 private:
  KernelPath saved_;
};

}  // namespace cohort
