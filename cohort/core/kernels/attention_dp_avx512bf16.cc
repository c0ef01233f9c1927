// attention_dp.h's products on AVX512-BF16: a register tile of 8 rows x 32
// columns (16 accumulators; the tiles are 64 wide at most, so a wider one
// would only run out of rows), per pair of the inner dimension two loads of
// B's panel and 8 broadcasts of A's words. Compiled with function target
// attributes like native's bf16 GEMM (gemm_bf16_avx512.cc): the table is
// handed out only where the CPU has avx512_bf16.
#include "cohort/core/kernels/attention_dp.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cohort/base/cpu.h"
#include "cohort/core/native/bf16_panels.h"

// GCC 12 warns of the undefined source vector inside its own AVX-512
// intrinsics (as cohort/base/isa.h notes for every ISA copy).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// In a namespace under isa_avx512 (one compilation with AVX512-BF16 on top,
// as native's bf16 GEMM), where tests/portability's check looks for AVX-512.
namespace cohort::kernels::detail::isa_avx512::bf16 {
namespace {

constexpr int kMR = 8;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"))) void dp_gemm(
    int64_t m, int64_t n, int64_t pairs, const uint16_t* a, int64_t a_rs, int64_t a_qs,
    const uint32_t* bp, float* c, int64_t ldc, bool accumulate) {
  for (int64_t p = 0; p * 32 < n; ++p) {
    const uint32_t* panel = bp + p * pairs * 32;
    for (int64_t r0 = 0; r0 < m; r0 += kMR) {
      const int rows = static_cast<int>(std::min<int64_t>(kMR, m - r0));
      // Rows past m read the last row again (their sums are not stored).
      const uint16_t* ar[kMR];
      for (int i = 0; i < kMR; ++i) ar[i] = a + (r0 + std::min(i, rows - 1)) * a_rs;
      __m512 acc[kMR][2];
      for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
      for (int64_t q = 0; q < pairs; ++q) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + q * 32);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + q * 32 + 16);
#pragma GCC unroll 8
        for (int i = 0; i < kMR; ++i) {
          int32_t word;
          std::memcpy(&word, ar[i] + q * a_qs, sizeof word);
          const __m512bh w = (__m512bh)_mm512_set1_epi32(word);
          acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w, b0);
          acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w, b1);
        }
      }
      for (int i = 0; i < rows; ++i) {
        float* row = c + (r0 + i) * ldc + p * 32;
        for (int v = 0; v < 2; ++v) {
          __m512 r = acc[i][v];
          if (accumulate) r = _mm512_add_ps(r, _mm512_loadu_ps(row + v * 16));
          _mm512_storeu_ps(row + v * 16, r);
        }
      }
    }
  }
}

#define COHORT_DP_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

COHORT_DP_TARGET inline __m256i round16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

COHORT_DP_TARGET void round_rows(const float* src, int64_t ld, int64_t rows, int64_t cols,
                                 uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < ld; j += 16) {
      const int64_t n = std::clamp<int64_t>(cols - j, 0, 16);
      const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + r * ld + j),
                          round16(_mm512_maskz_loadu_ps(m, src + r * ld + j)));
    }
}

COHORT_DP_TARGET void round_transposed(const float* src, int64_t ld, int64_t rows, uint32_t* dst) {
  const int64_t pairs = (rows + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    const float* lo = src + 2 * q * ld;
    const bool has_hi = 2 * q + 1 < rows;
    for (int64_t j = 0; j < ld; j += 16) {
      const __m512i a = _mm512_cvtepu16_epi32(round16(_mm512_loadu_ps(lo + j)));
      const __m512i b = has_hi ? _mm512_cvtepu16_epi32(round16(_mm512_loadu_ps(lo + ld + j)))
                               : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (j / 32) * pairs * 32 + q * 32 + j % 32,
                          _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }
}

COHORT_DP_TARGET inline __m512 exp2_fast(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);  // [-0.5, 0.5]: 2^f by its Taylor polynomial
  __m512 p = _mm512_set1_ps(1.3333558146428443e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402265069591007f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471805599453f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  // p 2^n; 0 below -127 (not less than -127 holds for NaN, which stays).
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-127.0f), _CMP_NLT_UQ),
                             _mm512_scalef_ps(p, n));
}

COHORT_DP_TARGET float row_exp(const float* s, int64_t n, int64_t n_zero, float c, float m,
                               float* p) {
  const __m512 vc = _mm512_set1_ps(c), vm = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < std::max(n, n_zero); j += 16) {
    const int64_t live = std::clamp<int64_t>(n - j, 0, 16);
    const int64_t out = std::clamp<int64_t>(n_zero - j, live, 16);
    const __mmask16 lm = live >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << live) - 1);
    const __mmask16 om = out >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << out) - 1);
    const __m512 e = _mm512_maskz_mov_ps(
        lm, exp2_fast(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(lm, s + j), vc, vm)));
    _mm512_mask_storeu_ps(p + j, om, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

constexpr AttentionDpOps kDpOps{&dp_gemm,
                                &round_rows,
                                &round_transposed,
                                &row_exp,
                                &native::isa_avx512::bf16::pack_along_k,
                                &native::isa_avx512::bf16::pack_across_k};

}  // namespace
}  // namespace cohort::kernels::detail::isa_avx512::bf16

namespace cohort::kernels::detail {

const AttentionDpOps* attention_dp_ops() {
  return cpu_features().avx512_bf16 ? &isa_avx512::bf16::kDpOps : nullptr;
}

}  // namespace cohort::kernels::detail

#else

namespace cohort::kernels::detail {
const AttentionDpOps* attention_dp_ops() { return nullptr; }
}  // namespace cohort::kernels::detail

#endif
