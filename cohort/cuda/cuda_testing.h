// For the CUDA layer's tests: a test that needs a GPU starts with
// COHORT_REQUIRE_CUDA(), which skips it, saying why, where no device can be
// used (no GPU, a driver too old for the runtime), as the suite must pass on
// machines without one.
#pragma once

#include <gtest/gtest.h>

#include "cohort/cuda/runtime.h"

#define COHORT_REQUIRE_CUDA()                                                                      \
  do {                                                                                             \
    if (::cohort::cuda::runtime().device_count() == 0)                                             \
      GTEST_SKIP() << "no usable CUDA device: " << ::cohort::cuda::runtime().unavailable_reason(); \
  } while (0)
