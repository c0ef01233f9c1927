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
  kInt8 = 7,  // signed char
  kBool = 8,  // one byte, 0 or 1 (reductions: see ReduceOp)
};
inline constexpr int kNumDataTypes = 9;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // sum, then divided by the world size (integer types: truncating division)
  kProduct = 2,
  kMin = 3,
  kMax = 4,
  // Bitwise and, or, xor: integer types and bool only (float types are an
  // InvalidArgument of the call, check_op_args in op_table.h).
  kBand = 5,
  kBor = 6,
  kBxor = 7,
};
inline constexpr int kNumReduceOps = 8;

// bool follows PyTorch (gloo) bool arithmetic, results always 0 or 1: sum
// and max are a logical or, product and min a logical and, band/bor/bxor
// and/or/xor; avg on bool is an InvalidArgument (PyTorch rejects it too).

// Bytes per element: 4, 8, 4, 8, 1, 2, 2, 1, 1.
size_t element_size(DataType dtype);
// "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16", "int8", "bool".
std::string_view dtype_name(DataType dtype);
// "sum", "avg", "product", "min", "max", "band", "bor", "bxor".
std::string_view reduce_op_name(ReduceOp op);

// uint8, int8, int32, int64 and bool: the dtypes the bitwise reductions take.
constexpr bool is_integral(DataType dtype) {
  return dtype == DataType::kUInt8 || dtype == DataType::kInt8 || dtype == DataType::kInt32 ||
         dtype == DataType::kInt64 || dtype == DataType::kBool;
}
// kBand, kBor, kBxor.
constexpr bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}
// Whether `op` is defined on `dtype`: every reduction on every dtype except
// the bitwise ones on float types and avg on bool. check_op_args (op_table.h)
// throws InvalidArgument for the others. (Inline: on every reducing op's path.)
constexpr bool reduction_defined(ReduceOp op, DataType dtype) {
  return is_bitwise(op) ? is_integral(dtype) : !(op == ReduceOp::kAvg && dtype == DataType::kBool);
}

// Timeouts of single operations. kUseDefaultTimeout (zero) means "the
// communicator's default timeout" (CommunicatorOptions::timeout).
using Duration = std::chrono::milliseconds;
inline constexpr Duration kUseDefaultTimeout{0};

}  // namespace cohort::collectives
