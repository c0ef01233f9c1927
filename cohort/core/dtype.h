// Element types of tensors. float32 is first-class for math; float64 is used
// by gradcheck; int64 holds labels and indices, uint8 images and masks, int32
// pool argmax indices. bfloat16 and float16 are storage types for now: they
// can be created, copied and converted with Tensor::to(), math on them is not
// implemented yet (ops throw NotSupported naming the dtype).
// All functions here are pure and thread safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace cohort {

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kUInt8, kBFloat16, kFloat16 };

constexpr DType kFloat32 = DType::kFloat32;
constexpr DType kFloat64 = DType::kFloat64;
constexpr DType kInt32 = DType::kInt32;
constexpr DType kInt64 = DType::kInt64;
constexpr DType kUInt8 = DType::kUInt8;
constexpr DType kBFloat16 = DType::kBFloat16;
constexpr DType kFloat16 = DType::kFloat16;
// LibTorch's spellings of the same dtypes (torch::kF32, torch::kLong, ...).
constexpr DType kFloat = DType::kFloat32;
constexpr DType kF32 = DType::kFloat32;
constexpr DType kDouble = DType::kFloat64;
constexpr DType kF64 = DType::kFloat64;
constexpr DType kInt = DType::kInt32;
constexpr DType kI32 = DType::kInt32;
constexpr DType kLong = DType::kInt64;
constexpr DType kI64 = DType::kInt64;
constexpr DType kByte = DType::kUInt8;
constexpr DType kU8 = DType::kUInt8;
constexpr DType kHalf = DType::kFloat16;
constexpr DType kF16 = DType::kFloat16;

// Bytes per element.
size_t dtype_size(DType t);
// "float32", "int64", ... (the names safetensors uses are in checkpoint/).
std::string_view dtype_name(DType t);
bool is_floating(DType t);  // float32/64, bfloat16, float16

// bfloat16: the upper 16 bits of a float32; conversion rounds to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f);
  explicit operator float() const;
};

// IEEE 754 binary16; conversion rounds to nearest even, overflow gives inf.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

// Maps a C++ element type to its DType (compile-time).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kFloat16;
};
template <typename T>
constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace cohort
