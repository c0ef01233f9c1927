// Element types and reductions of the collectives layer. This layer knows
// nothing of tensors (docs/design.md), so it keeps its own small enums; the
// distributed layer maps core's dtypes onto them.
//
// 16-bit types (bfloat16, float16) are reduced in float32 and rounded back
// (round to nearest even) after every combining step.
// Thread safety: pure functions and constants only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cohort::collectives {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kUInt8 = 4,
  kBFloat16 = 5,
  kFloat16 = 6,
};
inline constexpr int kNumDataTypes = 7;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // sum, then divided by the world size (integer types: truncating division)
  kProduct = 2,
  kMin = 3,
  kMax = 4,
};
inline constexpr int kNumReduceOps = 5;

// Bytes per element: 4, 8, 4, 8, 1, 2, 2.
size_t element_size(DataType dtype);
// "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16".
std::string_view dtype_name(DataType dtype);
// "sum", "avg", "product", "min", "max".
std::string_view reduce_op_name(ReduceOp op);

// Timeouts of single operations. kUseDefaultTimeout (zero) means "the
// communicator's default timeout" (CommunicatorOptions::timeout).
using Duration = std::chrono::milliseconds;
inline constexpr Duration kUseDefaultTimeout{0};

}  // namespace cohort::collectives
