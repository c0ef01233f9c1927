// Helpers of the dense area's parity tests (gemm_test.cc, ...): inputs made
// on the CPU from a fixed seed, the device under test, and a comparison of a
// device result with the CPU's that names the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/test_util.h"
#include "cohort/core/tensor.h"

namespace cohort::cuda::testing {

inline Device cuda0() { return Device("cuda:0"); }

// Uniform in [lo, hi), float32 unless asked, on the CPU.
inline Tensor random(const Shape& s, uint64_t seed, double lo = -2, double hi = 2,
                     DType dt = DType::kFloat32) {
  return cohort::testing::random_tensor(s, seed, dt, lo, hi);
}

// The CPU float64 values of any tensor (device or CPU, any dtype).
inline std::vector<double> values(const Tensor& t) {
  Tensor c = t.cpu();
  if (c.dtype() == DType::kBFloat16) c = native::bf16_to_float(c);
  return c.to_vector<double>();
}

// |got - want| <= atol + rtol * |want| elementwise, or, with `scale` (of
// want's shape), <= atol + rtol * scale (e.g. |a| |b| for a product, the
// bound of its rounding error). got may be on a device; shapes must match.
inline ::testing::AssertionResult close(const Tensor& got, const Tensor& want, double rtol,
                                        double atol, const Tensor& scale = Tensor()) {
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure()
           << "shapes differ: " << shape_str(got.sizes()) << " vs " << shape_str(want.sizes());
  std::vector<double> g = values(got), w = values(want);
  std::vector<double> s = scale.defined() ? values(scale) : std::vector<double>();
  double worst = 0;
  int64_t at = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = atol + rtol * (s.empty() ? std::abs(w[i]) : s[i]);
    const double err = std::abs(g[i] - w[i]);
    // NaN on either side is a failure, unless both are NaN.
    const bool bad = std::isnan(g[i]) != std::isnan(w[i]) || (!std::isnan(g[i]) && err > bound);
    if (bad && (at < 0 || err / bound > worst)) {
      worst = std::isnan(err) ? INFINITY : err / bound;
      at = static_cast<int64_t>(i);
    }
  }
  if (at < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << at << " of " << shape_str(want.sizes()) << ": got " << g[at] << ", want "
         << w[at] << " (" << worst << "x the bound)";
}

}  // namespace cohort::cuda::testing
