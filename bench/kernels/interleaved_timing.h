// Interleaved timing of several implementations of one pass, for the kernel
// benchmarks: each gets wall and process-CPU samples per call over rounds
// that rotate which implementation goes first, so that load from other
// processes falls on all of them alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace cohort::bench {

struct Impl {
  std::string name;
  std::function<void()> fn;
  std::string what;
  std::vector<double> samples{};      // wall seconds per call, one per round
  std::vector<double> cpu_samples{};  // process CPU seconds per call (all threads)
  int iters = 1;
};

double median(std::vector<double> v);

// Warm-up (at least 3 calls and 50 ms per implementation), then `repeats`
// rounds; each round times every implementation for about seconds/repeats,
// starting with a different one each round.
void time_all(std::vector<Impl>& impls, double seconds, int repeats);

}  // namespace cohort::bench
