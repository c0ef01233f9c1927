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

namespace cohort::kernels::detail {
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

constexpr AttentionDpOps kDpOps{&dp_gemm, &native::isa_avx512::bf16::pack_along_k,
                                &native::isa_avx512::bf16::pack_across_k};

}  // namespace

const AttentionDpOps* attention_dp_ops() { return cpu_features().avx512_bf16 ? &kDpOps : nullptr; }

}  // namespace cohort::kernels::detail

#else

namespace cohort::kernels::detail {
const AttentionDpOps* attention_dp_ops() { return nullptr; }
}  // namespace cohort::kernels::detail

#endif
