// ExpandingArray<D>: D sizes given as one number for every dimension or as D
// numbers (LibTorch's torch::ExpandingArray), so options read
// `Conv2dOptions(1, 10, 5).stride(2)` as well as `.stride({2, 1})`.
// A plain value; implicit from int64_t and std::array<int64_t, D> on purpose.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>

#include "cohort/base/error.h"

namespace cohort::nn {

template <size_t D>
struct ExpandingArray {
  ExpandingArray(int64_t v) { values.fill(v); }            // NOLINT(google-explicit-constructor)
  ExpandingArray(std::array<int64_t, D> v) : values(v) {}  // NOLINT(google-explicit-constructor)
  // {a, b}: D numbers, or {a}: one for all (throws InvalidArgument otherwise).
  ExpandingArray(std::initializer_list<int64_t> v) {  // NOLINT(google-explicit-constructor)
    COHORT_CHECK(v.size() == D || v.size() == 1, "expected {} sizes (or one for all), got {}", D,
                 v.size());
    if (v.size() == 1)
      values.fill(*v.begin());
    else
      std::copy(v.begin(), v.end(), values.begin());
  }
  operator std::array<int64_t, D>() const { return values; }  // NOLINT(google-explicit-constructor)
  int64_t operator[](size_t i) const { return values[i]; }
  std::array<int64_t, D> values;
};

}  // namespace cohort::nn
