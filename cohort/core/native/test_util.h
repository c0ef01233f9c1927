// Helpers shared by the core kernel tests.
#pragma once

#include <random>

#include "cohort/core/tensor.h"

namespace cohort::testing {

inline Tensor random_tensor(const Shape& s, uint64_t seed, DType dt = DType::kFloat32,
                            double lo = -2, double hi = 2) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = u(g);
  return Tensor::from_vector(v, s).to(dt);
}

}  // namespace cohort::testing
