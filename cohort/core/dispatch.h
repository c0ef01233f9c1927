// Dtype dispatch for kernels: calls a generic lambda with a value of the C++
// element type, e.g.
//   dispatch_floating(t.dtype(), "exp", [&](auto tag) { using T = decltype(tag); ... });
// Unsupported dtypes throw NotSupported naming the op and the dtype.
#pragma once

#include <string_view>

#include "cohort/base/error.h"
#include "cohort/core/dtype.h"

namespace cohort {

[[noreturn]] inline void throw_unsupported_dtype(std::string_view op, DType t) {
  throw NotSupported(fmt::format("{}: dtype {} is not supported", op, dtype_name(t)));
}

// float32, float64.
template <typename F>
decltype(auto) dispatch_floating(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    default:
      throw_unsupported_dtype(op, t);
  }
}

// float32, float64, int32, int64, uint8.
template <typename F>
decltype(auto) dispatch_arith(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    default:
      throw_unsupported_dtype(op, t);
  }
}

// Every dtype, including the storage-only bfloat16 and float16.
template <typename F>
decltype(auto) dispatch_all(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::kBFloat16:
      return f(BFloat16{});
    case DType::kFloat16:
      return f(Half{});
    default:
      return dispatch_arith(t, op, std::forward<F>(f));
  }
}

// Conversions between element types, bfloat16/float16 going through float.
template <typename To, typename From>
inline To cast_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, BFloat16> || std::is_same_v<From, Half>) {
    return cast_value<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16> || std::is_same_v<To, Half>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace cohort
