// For tests: run a test once per kernel path (cohort/base/cpu.h), so that
// every fast path the host can execute is checked against the reference, and
// the ones it cannot are reported as skipped rather than passed.
//
//   class MyKernel : public cohort::testing::KernelPathTest {};
//   TEST_P(MyKernel, MatchesReference) { ... }  // runs under the path
//   COHORT_INSTANTIATE_KERNEL_PATHS(MyKernel);
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "cohort/base/cpu.h"

namespace cohort {
// gtest prints parameters with this (test names in ctest then read "avx2").
inline void PrintTo(KernelPath path, std::ostream* os) { *os << kernel_path_name(path); }
}  // namespace cohort

namespace cohort::testing {

class KernelPathTest : public ::testing::TestWithParam<KernelPath> {
 protected:
  void SetUp() override {
    const std::string why = kernel_path_unsupported_reason(GetParam());
    if (!why.empty()) GTEST_SKIP() << kernel_path_name(GetParam()) << ": " << why;
    guard_ = std::make_unique<KernelPathGuard>(GetParam());
  }
  void TearDown() override { guard_.reset(); }

 private:
  std::unique_ptr<KernelPathGuard> guard_;
};

inline std::string kernel_path_param_name(const ::testing::TestParamInfo<KernelPath>& info) {
  return kernel_path_name(info.param);
}

}  // namespace cohort::testing

#define COHORT_INSTANTIATE_KERNEL_PATHS(suite)                                        \
  INSTANTIATE_TEST_SUITE_P(                                                           \
      Paths, suite,                                                                   \
      ::testing::Values(::cohort::KernelPath::kBaseline, ::cohort::KernelPath::kAvx2, \
                        ::cohort::KernelPath::kAvx512),                               \
      ::cohort::testing::kernel_path_param_name)
