#include "cohort/collectives/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/isa.h"
#include "cohort/collectives/reduce_kernel_table.h"

namespace cohort::collectives {

float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_float(uint16_t v) {
#if defined(__F16C__)
  return _cvtsh_ss(v);
#else
  uint32_t sign = (v & 0x8000u) << 16;
  uint32_t exp = (v >> 10) & 0x1fu;
  uint32_t man = v & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

uint16_t float_to_f16(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    float af;
    std::memcpy(&af, &abs, 4);
    // Scale so the half subnormal unit (2^-24) becomes 1 and round to even.
    float scaled = af * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias exponent and round to even
  return static_cast<uint16_t>(sign | (mant >> 13));
#endif
}

namespace {

#include "cohort/collectives/reduce_loops.inc"

// Any dtype's elements, behind void pointers.
template <typename T>
void reduce_any(void* dst, const void* src, size_t n, ReduceOp op) {
  reduce_typed(static_cast<T*>(dst), static_cast<const T*>(src), n, op);
}

// float16 conversions: F16C where the build targets it, else the scalar
// conversion (the baseline build has no F16C; the avx2 / avx512 paths have
// their own copies, reduce_kernels_isa.cc).
void f16_block_to_float(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = f16_to_float(in[i]);
}

void float_block_to_f16(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = float_to_f16(in[i]);
}

// bool as PyTorch's gloo reduces it: sum/avg and max are a logical or,
// product and min a logical and, bitwise ops their logical forms. Inputs are
// read as "non-zero" and results are 0 or 1.
void reduce_bool(uint8_t* __restrict dst, const uint8_t* __restrict src, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>((dst[i] | src[i]) != 0);
      return;
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(dst[i] != 0 && src[i] != 0);
      return;
    case ReduceOp::kBxor:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>((dst[i] != 0) != (src[i] != 0));
      return;
  }
}

// The baseline table: the plain loops above.
void f32_reference(float* dst, const float* src, size_t n, ReduceOp op) {
  reduce_typed(dst, src, n, op);
}
void f64_reference(double* dst, const double* src, size_t n, ReduceOp op) {
  reduce_typed(dst, src, n, op);
}
void bf16_reference(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op) {
  reduce_half<bf16_block_to_float, float_block_to_bf16>(dst, src, n, op);
}
void f16_reference(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op) {
  reduce_half<f16_block_to_float, float_block_to_f16>(dst, src, n, op);
}

const ReduceKernelTable kReferenceTable{&f32_reference, &f64_reference, &bf16_reference,
                                        &f16_reference};

}  // namespace

COHORT_ISA_DECLARE_TABLE(ReduceKernelTable, kReduceKernelTable)

const ReduceKernelTable& reduce_kernel_table_reference() { return kReferenceTable; }

const ReduceKernelTable& reduce_kernel_table() {
  return *COHORT_ISA_TABLE(ReduceKernelTable, &kReferenceTable, kReduceKernelTable);
}

void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  if (is_bitwise(op) && !is_integral(dtype)) {
    throw InvalidArgument(
        fmt::format("reduce: reduction '{}' needs an integer or bool dtype, got {}",
                    reduce_op_name(op), dtype_name(dtype)));
  }
  switch (dtype) {
    case DataType::kFloat32:
      return reduce_kernel_table().f32(static_cast<float*>(dst), static_cast<const float*>(src),
                                       count, op);
    case DataType::kFloat64:
      return reduce_kernel_table().f64(static_cast<double*>(dst), static_cast<const double*>(src),
                                       count, op);
    case DataType::kInt32:
      return reduce_any<int32_t>(dst, src, count, op);
    case DataType::kInt64:
      return reduce_any<int64_t>(dst, src, count, op);
    case DataType::kUInt8:
      return reduce_any<uint8_t>(dst, src, count, op);
    case DataType::kInt8:
      return reduce_any<int8_t>(dst, src, count, op);
    case DataType::kBool:
      return reduce_bool(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, op);
    case DataType::kBFloat16:
      return reduce_kernel_table().bf16(static_cast<uint16_t*>(dst),
                                        static_cast<const uint16_t*>(src), count, op);
    case DataType::kFloat16:
      return reduce_kernel_table().f16(static_cast<uint16_t*>(dst),
                                       static_cast<const uint16_t*>(src), count, op);
  }
  throw InvalidArgument(fmt::format("reduce: unknown dtype {}", static_cast<int>(dtype)));
}

namespace {
template <typename T>
void divide(void* data, size_t n, int d) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}
}  // namespace

void finish_avg(void* data, size_t count, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kFloat32:
      return divide<float>(data, count, divisor);
    case DataType::kFloat64:
      return divide<double>(data, count, divisor);
    case DataType::kInt32:
      return divide<int32_t>(data, count, divisor);
    case DataType::kInt64:
      return divide<int64_t>(data, count, divisor);
    case DataType::kUInt8:
      return divide<uint8_t>(data, count, divisor);
    case DataType::kInt8:
      return divide<int8_t>(data, count, divisor);
    case DataType::kBool:
      // avg on bool is refused by check_op_args (as PyTorch does); a direct
      // caller gets the same error rather than a value that is not 0/1.
      throw InvalidArgument("finish_avg: reduction 'avg' is not defined on bool");
    case DataType::kBFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(divisor));
      }
      return;
    }
    case DataType::kFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        p[i] = float_to_f16(f16_to_float(p[i]) / static_cast<float>(divisor));
      }
      return;
    }
  }
}

}  // namespace cohort::collectives
