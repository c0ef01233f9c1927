// Deterministic inputs and serial references for the collective suite:
// small integers, so every summation order gives the same bits in every
// dtype and results can be compared byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cohort/collectives/reference_values.h"
#include "cohort/collectives/types.h"

namespace cohort::suite {

using collectives::DataType;
using collectives::ReduceOp;

// An array of `count` elements of dtype, set and read as doubles.
class Values {
 public:
  Values(DataType dtype, size_t count)
      : dtype_(dtype), es_(collectives::element_size(dtype)), bytes_(count * es_ + 1) {}
  void* data() { return bytes_.data(); }
  size_t count() const { return (bytes_.size() - 1) / es_; }
  bool operator==(const Values& o) const { return bytes_ == o.bytes_; }

  void set(size_t i, double v) { collectives::testing::store_value(&bytes_[i * es_], dtype_, v); }
  double get(size_t i) const { return collectives::testing::load_value(&bytes_[i * es_], dtype_); }

 private:
  DataType dtype_;
  size_t es_;
  std::vector<std::byte> bytes_;  // one spare byte so data() is never null
};

using collectives::testing::input_value;

inline Values make_input(int rank, size_t count, DataType dtype, ReduceOp op) {
  Values v(dtype, count);
  for (size_t i = 0; i < count; ++i) v.set(i, input_value(rank, i, op, dtype));
  return v;
}

// The reduction over ranks [0, n) of make_input, elements [first, first+count).
inline Values reference_reduce(int n, size_t first, size_t count, DataType dtype, ReduceOp op) {
  Values out(dtype, count);
  for (size_t k = 0; k < count; ++k)
    out.set(k, collectives::testing::reference_value(n, first + k, op, dtype));
  return out;
}

}  // namespace cohort::suite
