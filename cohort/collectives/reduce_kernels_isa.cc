// The float reductions of reduce_kernel_table.h compiled for one ISA: the
// plain loops of reduce_kernels.cc, vectorized by the compiler (ymm / zmm),
// with float16 <-> float32 by F16C (vcvtph2ps / vcvtps2ph, round to nearest
// even), which every CPU of these paths has.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cohort/base/isa.h"
#include "cohort/collectives/reduce_kernel_table.h"

COHORT_ISA_BEGIN
namespace cohort::collectives::COHORT_ISA_NS {
namespace {

template <typename T, typename F>
void apply(T* __restrict dst, const T* __restrict src, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = f(dst[i], src[i]);
}

// The reference's operations, NaN handling included: min/max keep dst when
// either side is NaN (a < b is false), sum and product propagate it.
template <typename T>
void reduce_typed(T* dst, const T* src, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return apply(dst, src, n, [](T a, T b) { return a + b; });
    case ReduceOp::kProduct:
      return apply(dst, src, n, [](T a, T b) { return a * b; });
    case ReduceOp::kMin:
      return apply(dst, src, n, [](T a, T b) { return b < a ? b : a; });
    case ReduceOp::kMax:
      return apply(dst, src, n, [](T a, T b) { return a < b ? b : a; });
  }
}

void f32(float* dst, const float* src, size_t n, ReduceOp op) { reduce_typed(dst, src, n, op); }
void f64(double* dst, const double* src, size_t n, ReduceOp op) { reduce_typed(dst, src, n, op); }

constexpr size_t kHalfBlock = 256;

void bf16_block_to_float(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

void float_block_to_bf16(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &in[i], 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
  }
}

// F16C has no plain-loop spelling (GCC 12 keeps _Float16 conversions scalar
// without AVX512-FP16), hence the intrinsics.
void f16_block_to_float(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  size_t i = 0;
#if defined(COHORT_ISA_AVX512)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

void float_block_to_f16(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  size_t i = 0;
#if defined(COHORT_ISA_AVX512)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}

template <void (*Load)(const uint16_t*, float*, size_t),
          void (*Store)(const float*, uint16_t*, size_t)>
void reduce_half(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op) {
  alignas(64) float a[kHalfBlock];
  alignas(64) float b[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t k = n - i < kHalfBlock ? n - i : kHalfBlock;
    Load(dst + i, a, k);
    Load(src + i, b, k);
    reduce_typed(a, b, k, op);
    Store(a, dst + i, k);
  }
}

void bf16(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op) {
  reduce_half<bf16_block_to_float, float_block_to_bf16>(dst, src, n, op);
}
void f16(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op) {
  reduce_half<f16_block_to_float, float_block_to_f16>(dst, src, n, op);
}

}  // namespace

extern const ReduceKernelTable kReduceKernelTable;
const ReduceKernelTable kReduceKernelTable{&f32, &f64, &bf16, &f16};

}  // namespace cohort::collectives::COHORT_ISA_NS
COHORT_ISA_END
