// Helpers shared by the tests of the backward engine and of inter-op
// parallelism (header only, included by *_test.cc).
// Rendezvous proves that two pieces of code run at the same time without
// measuring time: each waits for the other, with a generous time-out so that
// a test fails (instead of hanging) when they run one after the other.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "cohort/core/random.h"
#include "cohort/core/tensor.h"

namespace cohort::autograd::testing {

class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}
  // True when all parties arrived within the time-out.
  bool arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (++arrived_ >= parties_) cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return arrived_ >= parties_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int parties_;
  int arrived_ = 0;
};

// N(0, 1) float32 values drawn from a generator seeded with `seed`.
inline Tensor randn(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return cohort::randn(shape, gen);
}

}  // namespace cohort::autograd::testing
