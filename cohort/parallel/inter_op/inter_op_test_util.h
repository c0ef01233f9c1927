// Helpers for the inter-op tests (header only, included by *_test.cc).
// Rendezvous proves that two pieces of code run at the same time without
// measuring time: each waits for the other, with a generous time-out so that a
// test fails (instead of hanging) when they run one after the other.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <vector>

#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/parallel.h"
#include "cohort/core/tensor.h"

namespace cohort::parallel::testing {

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

// y = x whose backward first meets the other parties' backwards.
inline Tensor meet_in_backward(const Tensor& x, Rendezvous& r, std::atomic<int>& met) {
  Tensor out = x.detach().clone();
  return autograd::record(out, "MeetBackward", {x},
                          [&r, &met](const Tensor& g, const std::vector<bool>&) {
                            if (r.arrive_and_wait()) ++met;
                            return std::vector<Tensor>{g};
                          });
}

inline Tensor randn(const Shape& s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = n(g);
  return Tensor::from_vector(v, s).to(kFloat32);
}

inline void expect_close(const Tensor& a, const Tensor& b, float tol = 1e-5f) {
  ASSERT_TRUE(a.defined());
  ASSERT_TRUE(b.defined());
  ASSERT_EQ(a.sizes(), b.sizes());
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol * (1.0f + std::abs(vb[i])));
}

}  // namespace cohort::parallel::testing
