// Deterministic inputs and serial references for the collective suite:
// small integers, so every summation order gives the same bits in every
// dtype and results can be compared byte for byte.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cohort/collectives/reduce_kernels.h"
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

  void set(size_t i, double v) {
    std::byte* p = &bytes_[i * es_];
    switch (dtype_) {
      case DataType::kFloat32: {
        auto f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        return;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        return;
      case DataType::kInt32: {
        auto x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        return;
      }
      case DataType::kInt64: {
        auto x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        return;
      }
      case DataType::kUInt8: {
        auto x = static_cast<uint8_t>(static_cast<int64_t>(v));
        std::memcpy(p, &x, 1);
        return;
      }
      case DataType::kBFloat16: {
        uint16_t x = collectives::float_to_bf16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        return;
      }
      case DataType::kFloat16: {
        uint16_t x = collectives::float_to_f16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        return;
      }
    }
  }
  double get(size_t i) const {
    const std::byte* p = &bytes_[i * es_];
    switch (dtype_) {
      case DataType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DataType::kFloat64: {
        double d;
        std::memcpy(&d, p, 8);
        return d;
      }
      case DataType::kInt32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        return x;
      }
      case DataType::kInt64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        return static_cast<double>(x);
      }
      case DataType::kUInt8:
        return static_cast<double>(static_cast<uint8_t>(*p));
      case DataType::kBFloat16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        return collectives::bf16_to_float(x);
      }
      case DataType::kFloat16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        return collectives::f16_to_float(x);
      }
    }
    return 0;
  }

 private:
  DataType dtype_;
  size_t es_;
  std::vector<std::byte> bytes_;  // one spare byte so data() is never null
};

// What rank `rank` contributes at element i.
inline double input_value(int rank, size_t i, ReduceOp op, DataType dtype) {
  auto r = static_cast<size_t>(rank);
  if (op == ReduceOp::kProduct) return (r + i) % 5 == 0 ? 2.0 : 1.0;
  if (dtype == DataType::kUInt8) return static_cast<double>((r * 3 + i) % 7);
  return static_cast<double>(static_cast<int64_t>((r * 7 + i * 3) % 11) - 5);
}

inline Values make_input(int rank, size_t count, DataType dtype, ReduceOp op) {
  Values v(dtype, count);
  for (size_t i = 0; i < count; ++i) v.set(i, input_value(rank, i, op, dtype));
  return v;
}

// The reduction over ranks [0, n) of make_input, elements [first, first+count).
inline Values reference_reduce(int n, size_t first, size_t count, DataType dtype, ReduceOp op) {
  Values out(dtype, count);
  bool integral =
      dtype == DataType::kInt32 || dtype == DataType::kInt64 || dtype == DataType::kUInt8;
  for (size_t k = 0; k < count; ++k) {
    size_t i = first + k;
    double acc = input_value(0, i, op, dtype);
    for (int r = 1; r < n; ++r) {
      double v = input_value(r, i, op, dtype);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc += v;
          break;
        case ReduceOp::kProduct:
          acc *= v;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
      }
    }
    if (op == ReduceOp::kAvg) {
      if (dtype == DataType::kUInt8) {
        acc = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(acc)) / n);
      } else if (integral) {
        acc = static_cast<double>(static_cast<int64_t>(acc) / n);
      } else if (dtype == DataType::kFloat64) {
        acc = acc / n;
      } else {
        acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
      }
    }
    out.set(k, acc);
  }
  return out;
}

}  // namespace cohort::suite
