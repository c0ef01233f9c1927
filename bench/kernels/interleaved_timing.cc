#include "bench/kernels/interleaved_timing.h"

#include <time.h>

#include <algorithm>
#include <chrono>

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void time_all(std::vector<Impl>& impls, double seconds, int repeats) {
  for (Impl& im : impls) {
    const auto t0 = Clock::now();
    int calls = 0;
    while (calls < 3 || seconds_since(t0) < 0.05) {
      im.fn();
      ++calls;
    }
    const double one = seconds_since(t0) / calls;
    im.iters = std::max(1, static_cast<int>(seconds / repeats / one));
  }
  for (int r = 0; r < repeats; ++r) {
    for (size_t k = 0; k < impls.size(); ++k) {
      Impl& im = impls[(k + r) % impls.size()];
      const double c0 = process_cpu_seconds();
      const auto t0 = Clock::now();
      for (int i = 0; i < im.iters; ++i) im.fn();
      im.samples.push_back(seconds_since(t0) / im.iters);
      im.cpu_samples.push_back((process_cpu_seconds() - c0) / im.iters);
    }
  }
}

}  // namespace cohort::bench
