// Test support shared by the collectives tests and tests/distributed: the
// deterministic inputs every rank contributes, the serial reference of their
// reduction, and reading/writing one element of any DataType as a double.
// Inputs are small integers, so every summation order gives the same bits in
// every dtype and results compare byte for byte. Header-only; no gtest.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cohort/collectives/reduce_kernels.h"
#include "cohort/collectives/types.h"

namespace cohort::collectives::testing {

// The value rank `rank` contributes at element i (small integers; products stay tiny).
inline double input_value(int rank, size_t i, ReduceOp op, DataType dtype) {
  auto r = static_cast<size_t>(rank);
  if (dtype == DataType::kBool) return (r * 5 + i * 3) % 7 < 3 ? 1.0 : 0.0;
  if (op == ReduceOp::kProduct) return (r + i) % 5 == 0 ? 2.0 : 1.0;
  if (dtype == DataType::kUInt8) return static_cast<double>((r * 3 + i) % 7);
  return static_cast<double>(static_cast<int64_t>((r * 7 + i * 3) % 11) - 5);
}

// bool's reductions (types.h): or, and or xor of the ranks' 0/1 values.
inline double reference_bool(int n, size_t i, ReduceOp op) {
  bool acc = input_value(0, i, op, DataType::kBool) != 0;
  for (int r = 1; r < n; ++r) {
    const bool v = input_value(r, i, op, DataType::kBool) != 0;
    switch (op) {
      case ReduceOp::kProduct:
      case ReduceOp::kMin:
      case ReduceOp::kBand:
        acc = acc && v;
        break;
      case ReduceOp::kBxor:
        acc = acc != v;
        break;
      default:  // sum, max, bor (avg is not defined on bool)
        acc = acc || v;
        break;
    }
  }
  return acc ? 1.0 : 0.0;
}

// The reduction over ranks [0, n) of input_value at element i, rounded as the
// collectives round it (avg: integer division for integers, float32 for the
// float32 and 16-bit types; bitwise ops on the two's complement int64 value,
// which the narrower integer types truncate alike).
inline double reference_value(int n, size_t i, ReduceOp op, DataType dtype) {
  if (dtype == DataType::kBool) return reference_bool(n, i, op);
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
      case ReduceOp::kBand:
        acc = static_cast<double>(static_cast<int64_t>(acc) & static_cast<int64_t>(v));
        break;
      case ReduceOp::kBor:
        acc = static_cast<double>(static_cast<int64_t>(acc) | static_cast<int64_t>(v));
        break;
      case ReduceOp::kBxor:
        acc = static_cast<double>(static_cast<int64_t>(acc) ^ static_cast<int64_t>(v));
        break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  switch (dtype) {
    case DataType::kUInt8:
      return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(acc)) / n);
    case DataType::kInt8:
      return static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(acc)) / n);
    case DataType::kInt32:
    case DataType::kInt64:
      return static_cast<double>(static_cast<int64_t>(acc) / n);
    case DataType::kFloat64:
      return acc / n;
    default:
      return static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  }
}

// Writes v at p as one element of dtype.
inline void store_value(std::byte* p, DataType dtype, double v) {
  switch (dtype) {
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
    case DataType::kInt8: {
      auto x = static_cast<int8_t>(static_cast<int64_t>(v));
      std::memcpy(p, &x, 1);
      return;
    }
    case DataType::kBool: {
      uint8_t x = v != 0 ? 1 : 0;
      std::memcpy(p, &x, 1);
      return;
    }
    case DataType::kBFloat16: {
      uint16_t x = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      return;
    }
    case DataType::kFloat16: {
      uint16_t x = float_to_f16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      return;
    }
  }
}

// Reads the element of dtype at p as a double.
inline double load_value(const std::byte* p, DataType dtype) {
  switch (dtype) {
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
    case DataType::kBool:
      return static_cast<double>(static_cast<uint8_t>(*p));
    case DataType::kInt8:
      return static_cast<double>(static_cast<int8_t>(*p));
    case DataType::kBFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return bf16_to_float(x);
    }
    case DataType::kFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return f16_to_float(x);
    }
  }
  return 0;
}

}  // namespace cohort::collectives::testing
