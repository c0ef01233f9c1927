// Helpers shared by the parity tests (parity_test.cc, gpt_parity_test.cc):
// running the PyTorch script and comparing tensors relative to their scale.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cohort/core/tensor.h"

namespace cohort::parity {

// The system Python (docs/reference.md) unless the build names another
// (cmake -DCOHORT_PARITY_PYTHON=...): a test's inputs come from its build, not
// from the caller's environment.
inline std::string python() { return COHORT_PARITY_PYTHON; }

// Runs a shell command, returning its exit status and combined output.
inline int run(const std::string& cmd, std::string& output) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) output.append(buf, n);
  int status = pclose(pipe.release());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// max |a - b| and max |b| over two tensors of one shape.
struct Diff {
  double max_abs = 0;
  double scale = 0;
  double rel() const { return scale > 0 ? max_abs / scale : max_abs; }
};

inline Diff diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  Diff d;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    d.max_abs = std::max(d.max_abs, std::abs(va[i] - vb[i]));
    if (!std::isfinite(va[i] - vb[i])) d.max_abs = INFINITY;
    d.scale = std::max(d.scale, std::abs(vb[i]));
  }
  return d;
}

// max |a - b| <= rtol * max |b| + atol: relative to the tensor's scale, so that
// tiny elements of a gradient do not demand more than float32 can give.
inline ::testing::AssertionResult close(const std::string& what, const Tensor& a, const Tensor& b,
                                        double rtol = 1e-4, double atol = 1e-6) {
  if (a.sizes() != b.sizes())
    return ::testing::AssertionFailure()
           << what << ": shape " << shape_str(a.sizes()) << " vs " << shape_str(b.sizes());
  Diff d = diff(a, b);
  if (d.max_abs <= rtol * d.scale + atol && std::isfinite(d.max_abs))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": max |cohort - torch| = " << d.max_abs << ", torch scale " << d.scale;
}

}  // namespace cohort::parity
