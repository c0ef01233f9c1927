#include "cohort/core/dtype.h"

#include <cmath>

#include "cohort/base/error.h"

namespace cohort {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  throw InvalidArgument("dtype_size: unknown dtype");
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "unknown";
}

bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}

BFloat16::BFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) {
    bits = 0x7fc0;
    return;
  }
  uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  bits = static_cast<uint16_t>((u + rounding) >> 16);
}

BFloat16::operator float() const {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or nan
    bits = static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
    return;
  }
  if (abs >= 0x477ff000) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00);
    return;
  }
  if (abs < 0x38800000) {  // subnormal or zero in half
    // value = abs_f * 2^24 rounded to nearest even gives the mantissa.
    float af;
    std::memcpy(&af, &abs, 4);
    float scaled = af * 16777216.0f;  // exact (power of two)
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    bits = static_cast<uint16_t>(sign | m);
    return;
  }
  uint32_t e = ((abs >> 23) - 112) << 10;
  uint32_t m = (abs >> 13) & 0x3ff;
  uint32_t h = e | m;
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  bits = static_cast<uint16_t>(sign | h);
}

Half::operator float() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t e = (bits >> 10) & 0x1f;
  const uint32_t m = bits & 0x3ff;
  uint32_t u;
  if (e == 0) {
    float f = static_cast<float>(m) / 16777216.0f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (e == 31) {
    u = sign | 0x7f800000 | (m << 13);
  } else {
    u = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace cohort
