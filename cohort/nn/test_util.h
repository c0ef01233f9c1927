// Test helpers shared by the nn tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cohort/base/error.h"

namespace cohort::nn::testing {

// Runs fn, expects it to throw E, and checks every fragment is in what().
template <typename E = InvalidArgument>
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    std::string what = e.what();
    for (const auto& f : fragments)
      EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' not in: " << what;
  }
}

}  // namespace cohort::nn::testing
