// Helpers for the inter-op tests (header only, included by *_test.cc);
// Rendezvous and randn come from autograd/autograd_testing.h.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <vector>

#include "cohort/autograd/autograd_testing.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/parallel.h"
#include "cohort/core/tensor.h"

namespace cohort::parallel::testing {

using autograd::testing::randn;
using autograd::testing::Rendezvous;

// y = x whose backward first meets the other parties' backwards.
inline Tensor meet_in_backward(const Tensor& x, Rendezvous& r, std::atomic<int>& met) {
  Tensor out = x.detach().clone();
  return autograd::record(out, "MeetBackward", {x},
                          [&r, &met](const Tensor& g, const std::vector<bool>&) {
                            if (r.arrive_and_wait()) ++met;
                            return std::vector<Tensor>{g};
                          });
}

inline void expect_close(const Tensor& a, const Tensor& b, float tol = 1e-5f) {
  ASSERT_TRUE(a.defined());
  ASSERT_TRUE(b.defined());
  ASSERT_EQ(a.sizes(), b.sizes());
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol * (1.0f + std::abs(vb[i])));
}

}  // namespace cohort::parallel::testing
