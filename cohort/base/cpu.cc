#include "cohort/base/cpu.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "cohort/base/error.h"

namespace cohort {
namespace {

std::string read_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    // x86: "model name"; aarch64 kernels print no model name, only parts.
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t b = line.find_first_not_of(" \t", colon + 1);
        return b == std::string::npos ? std::string() : line.substr(b);
      }
    }
  }
  return "unknown";
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model = read_model();
#if defined(__x86_64__) || defined(__i386__)
  f.arch = "x86_64";
  __builtin_cpu_init();
  f.sse42 = __builtin_cpu_supports("sse4.2");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  // GCC 12's __builtin_cpu_supports knows neither f16c nor the BF16/AMX bits:
  // read CPUID directly (leaf 1 ecx bit 29; leaf 7 subleaf 1 eax bit 5;
  // leaf 7 subleaf 0 edx bit 22).
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  f.f16c = (c >> 29) & 1u;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
  if (a >= 7) {
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    f.amx_bf16 = (d >> 22) & 1u;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    f.avx512_bf16 = (a >> 5) & 1u;
  }
#elif defined(__aarch64__)
  f.arch = "aarch64";
  f.neon = true;  // Advanced SIMD is mandatory in ARMv8-A.
#else
  f.arch = "other";
#endif
  return f;
}

// Whether this build has kernels for `path` (the *_isa.cc copies exist only
// on x86-64).
bool built(KernelPath path) {
#if defined(__x86_64__)
  return true;
#else
  return path == KernelPath::kBaseline;
#endif
}

constexpr int kUnset = -1;
std::atomic<int> g_path{kUnset};

}  // namespace

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  const std::pair<bool, const char*> all[] = {{sse42, "sse4_2"},      {avx, "avx"},
                                              {avx2, "avx2"},         {fma, "fma"},
                                              {f16c, "f16c"},         {avx512f, "avx512f"},
                                              {avx512dq, "avx512dq"}, {avx512bw, "avx512bw"},
                                              {avx512vl, "avx512vl"}, {avx512_bf16, "avx512_bf16"},
                                              {amx_bf16, "amx_bf16"}, {neon, "neon"}};
  for (const auto& [has, name] : all)
    if (has) out.emplace_back(name);
  return out;
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const char* kernel_path_name(KernelPath path) {
  switch (path) {
    case KernelPath::kBaseline:
      return "baseline";
    case KernelPath::kAvx2:
      return "avx2";
    case KernelPath::kAvx512:
      return "avx512";
  }
  return "?";
}

KernelPath parse_kernel_path(std::string_view name) {
  for (KernelPath p : {KernelPath::kBaseline, KernelPath::kAvx2, KernelPath::kAvx512})
    if (name == kernel_path_name(p)) return p;
  throw InvalidArgument(
      fmt::format("kernel path '{}' is not one of: baseline, avx2, avx512", std::string(name)));
}

std::string kernel_path_unsupported_reason(KernelPath path) {
  if (!built(path))
    return fmt::format("this build for {} has no {} kernels", cpu_features().arch,
                       kernel_path_name(path));
  const CpuFeatures& f = cpu_features();
  std::string missing;
  auto need = [&](bool has, const char* name) {
    if (!has) missing += missing.empty() ? name : std::string(", ") + name;
  };
  if (path == KernelPath::kAvx2 || path == KernelPath::kAvx512) {
    need(f.avx2, "avx2");
    need(f.fma, "fma");
    need(f.f16c, "f16c");
  }
  if (path == KernelPath::kAvx512) {
    need(f.avx512f, "avx512f");
    need(f.avx512dq, "avx512dq");
    need(f.avx512bw, "avx512bw");
    need(f.avx512vl, "avx512vl");
  }
  if (missing.empty()) return {};
  return fmt::format("this CPU ({}) lacks {}", f.model, missing);
}

bool kernel_path_supported(KernelPath path) { return kernel_path_unsupported_reason(path).empty(); }

std::vector<KernelPath> supported_kernel_paths() {
  std::vector<KernelPath> out;
  for (KernelPath p : {KernelPath::kBaseline, KernelPath::kAvx2, KernelPath::kAvx512})
    if (kernel_path_supported(p)) out.push_back(p);
  return out;
}

KernelPath best_kernel_path() { return supported_kernel_paths().back(); }

void set_kernel_path(KernelPath path) {
  const std::string why = kernel_path_unsupported_reason(path);
  if (!why.empty())
    throw InvalidArgument(fmt::format(
        "cannot use the {} kernels: {}; this CPU can run: {}", kernel_path_name(path), why, [] {
          std::string s;
          for (KernelPath p : supported_kernel_paths())
            s += (s.empty() ? "" : ", ") + std::string(kernel_path_name(p));
          return s;
        }()));
  g_path.store(static_cast<int>(path), std::memory_order_relaxed);
}

KernelPath kernel_path() {
  const int p = g_path.load(std::memory_order_relaxed);
  if (p != kUnset) return static_cast<KernelPath>(p);
  int expected = kUnset;
  g_path.compare_exchange_strong(expected, static_cast<int>(best_kernel_path()));
  return static_cast<KernelPath>(g_path.load(std::memory_order_relaxed));
}

void apply_kernel_path_setting(std::string_view value, std::string_view origin) {
  try {
    set_kernel_path(value.empty() || value == "auto" ? best_kernel_path()
                                                     : parse_kernel_path(value));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}={}: {}", origin, value, e.what()));
  }
}

KernelPathGuard::KernelPathGuard(KernelPath path) : saved_(kernel_path()) { set_kernel_path(path); }
KernelPathGuard::~KernelPathGuard() { g_path.store(static_cast<int>(saved_)); }

}  // namespace cohort
