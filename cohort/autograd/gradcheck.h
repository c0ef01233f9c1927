// Finite-difference gradient check. Compares the gradient that backward
// computes for L = sum(fn(inputs) * R) (R a fixed pseudo-random tensor, so
// every output element is weighted differently) with central differences
// (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input that
// requires grad. Use float64 inputs for tight tolerances; float32 works with
// eps ~1e-2 and looser tolerances. Inputs are perturbed in place and
// restored. Not thread safe with respect to the inputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 0;  // for the projection R
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // first mismatch: input, element, analytical, numerical
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});
inline GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                 double eps, double atol, double rtol) {
  return gradcheck(fn, inputs, GradcheckOptions{eps, atol, rtol, 0});
}

}  // namespace cohort::autograd
