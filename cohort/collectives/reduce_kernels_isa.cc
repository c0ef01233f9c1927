// The float reductions of reduce_kernel_table.h compiled for one ISA: the
// plain loops of reduce_kernels.cc, vectorized by the compiler (ymm / zmm),
// with float16 <-> float32 by F16C (vcvtph2ps / vcvtps2ph, round to nearest
// even), which every CPU of these paths has.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cohort/base/isa.h"
#include "cohort/collectives/reduce_kernel_table.h"

COHORT_ISA_BEGIN
namespace cohort::collectives::COHORT_ISA_NS {
namespace {

#include "cohort/collectives/reduce_loops.inc"

void f32(float* dst, const float* src, size_t n, ReduceOp op) { reduce_typed(dst, src, n, op); }
void f64(double* dst, const double* src, size_t n, ReduceOp op) { reduce_typed(dst, src, n, op); }

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
