// Helpers for the pointwise area's parity tests (the *_test.cc files beside
// the kernels): inputs are built on the CPU with a fixed seed, the op runs on
// the CPU and on cuda:0, and the results are compared on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "cohort/core/native/test_util.h"
#include "cohort/core/tensor.h"
#include "cohort/cuda/cuda_testing.h"

namespace cohort::cuda::testing {

using cohort::testing::random_tensor;

inline Device gpu() { return Device("cuda:0"); }

// Integers uniform in [lo, hi) of dtype dt, on the CPU.
inline Tensor random_ints(const Shape& s, uint64_t seed, int64_t lo, int64_t hi,
                          DType dt = DType::kInt64) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  std::vector<int64_t> v(shape_numel(s));
  for (auto& x : v) x = u(g);
  return Tensor::from_vector(v, s).to(dt);
}

// `device` (a CUDA result) equals `host` in shape, dtype and values within
// |d - h| <= atol + rtol * |h| (NaNs equal where both are NaN).
inline ::testing::AssertionResult same_values(const Tensor& device, const Tensor& host,
                                              double rtol = 1e-5, double atol = 1e-6) {
  if (!device.is_cuda())
    return ::testing::AssertionFailure() << "result is on " << device.device().str();
  if (device.sizes() != host.sizes())
    return ::testing::AssertionFailure()
           << "shape " << shape_str(device.sizes()) << " vs " << shape_str(host.sizes());
  if (device.dtype() != host.dtype())
    return ::testing::AssertionFailure()
           << "dtype " << dtype_name(device.dtype()) << " vs " << dtype_name(host.dtype());
  std::vector<double> d = device.cpu().to_vector<double>();
  std::vector<double> h = host.to_vector<double>();
  for (size_t i = 0; i < d.size(); ++i) {
    if (std::isnan(d[i]) && std::isnan(h[i])) continue;
    if (!(std::abs(d[i] - h[i]) <= atol + rtol * std::abs(h[i])))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << d[i] << " vs " << h[i] << " (of " << d.size() << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cohort::cuda::testing
