// attention_dp.h's products on AVX512-BF16: register tiles of 6 rows x 64
// columns (24 accumulators: per pair of the inner dimension four loads of
// B's two panels and 6 broadcasts of A's words), and of 8 rows x 32 columns
// where one panel is left (a last lone panel, or rows of a causal tile that
// need only the first). Row counts are template arguments, so the
// accumulators stay in registers through the stores: the 8 x 32 tile with a
// run-time row count went through the stack, 82 % of one core's peak on
// q k^T against these tiles' 92 %. Compiled with function target attributes
// like native's bf16 GEMM (gemm_bf16_avx512.cc): the table is handed out
// only where the CPU has avx512_bf16.
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
#pragma GCC diagnostic ignored "-Wuninitialized"

// In a namespace under isa_avx512 (one compilation with AVX512-BF16 on top,
// as native's bf16 GEMM), where tests/portability's check looks for AVX-512.
namespace cohort::kernels::detail::isa_avx512::bf16 {
namespace {

#define COHORT_DP_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

// c[r * ldc + x] (accumulate ? += : =) the products of R rows of a with V
// vectors of 16 columns over the pairs [q_begin, q_end); vectors 2j and
// 2j + 1 come from panels[j] (32 columns each).
template <int R, int V>
COHORT_DP_TARGET inline void dp_tile(int64_t q_begin, int64_t q_end, const uint16_t* a,
                                     int64_t a_rs, int64_t a_qs, const uint32_t* const* panels,
                                     float* c, int64_t ldc, bool accumulate) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t q = q_begin; q < q_end; ++q) {
    __m512bh b[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      b[v] = (__m512bh)_mm512_loadu_si512(panels[v / 2] + q * 32 + (v % 2) * 16);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      int32_t word;
      std::memcpy(&word, a + i * a_rs + q * a_qs, sizeof word);
      const __m512bh w = (__m512bh)_mm512_set1_epi32(word);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], w, b[v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* out = c + i * ldc + v * 16;
      __m512 r = acc[i][v];
      if (accumulate) r = _mm512_add_ps(r, _mm512_loadu_ps(out));
      _mm512_storeu_ps(out, r);
    }
}

// dp_tile with rows (1 <= rows <= K) fixed at compile time.
template <int K, int V>
COHORT_DP_TARGET inline void dp_tile_of(int64_t rows, int64_t q_begin, int64_t q_end,
                                        const uint16_t* a, int64_t a_rs, int64_t a_qs,
                                        const uint32_t* const* panels, float* c, int64_t ldc,
                                        bool accumulate) {
  if constexpr (K > 0) {
    if (rows == K)
      dp_tile<K, V>(q_begin, q_end, a, a_rs, a_qs, panels, c, ldc, accumulate);
    else
      dp_tile_of<K - 1, V>(rows, q_begin, q_end, a, a_rs, a_qs, panels, c, ldc, accumulate);
  }
}

// Rows [r_begin, r_end) against the panels, in tiles of R rows (the last
// one shorter). A tile's rows need only the inner elements [r + band.lo,
// r + 1 + band.hi): its pairs outside them are left out.
template <int R, int V>
COHORT_DP_TARGET void dp_rows(int64_t r_begin, int64_t r_end, int64_t pairs, Band band,
                              const uint16_t* a, int64_t a_rs, int64_t a_qs,
                              const uint32_t* const* panels, float* c, int64_t ldc,
                              bool accumulate) {
  for (int64_t r0 = r_begin; r0 < r_end; r0 += R) {
    const int64_t rows = std::min<int64_t>(R, r_end - r0);
    const int64_t q_begin = std::max<int64_t>(0, r0 + band.lo) / 2;
    const int64_t q_end = std::clamp<int64_t>((r0 + rows + band.hi + 1) / 2, 0, pairs);
    if (accumulate && q_end <= q_begin) continue;
    dp_tile_of<R, V>(rows, q_begin, q_end, a + r0 * a_rs, a_rs, a_qs, panels, c + r0 * ldc, ldc,
                     accumulate);
  }
}

void zero_block(float* c, int64_t ldc, int64_t r_begin, int64_t r_end, int64_t cols) {
  for (int64_t r = r_begin; r < r_end; ++r) std::fill(c + r * ldc, c + r * ldc + cols, 0.0f);
}

COHORT_DP_TARGET void dp_scores(int64_t m, int64_t n, int64_t pairs, const uint16_t* a,
                                int64_t a_rs, int64_t a_qs, const uint32_t* bp, float* c,
                                int64_t ldc, Band band) {
  const int64_t panel_words = pairs * 32;
  // The first row that needs column x: r + 1 + band.hi > x.
  const auto first_row = [&](int64_t x) { return std::clamp<int64_t>(x - band.hi, 0, m); };
  int64_t p = 0;
  for (; (p + 2) * 32 <= n; p += 2) {
    const uint32_t* panels[2] = {bp + p * panel_words, bp + (p + 1) * panel_words};
    float* cp = c + p * 32;
    const int64_t one = first_row(p * 32), both = first_row((p + 1) * 32);
    zero_block(cp, ldc, 0, one, 64);
    // Rows that need only the first of the two panels.
    dp_rows<8, 2>(one, both, pairs, Band{}, a, a_rs, a_qs, panels, cp, ldc, false);
    zero_block(cp + 32, ldc, one, both, 32);
    dp_rows<6, 4>(both, m, pairs, Band{}, a, a_rs, a_qs, panels, cp, ldc, false);
  }
  if (p * 32 < n) {
    const uint32_t* panels[1] = {bp + p * panel_words};
    const int64_t one = first_row(p * 32);
    zero_block(c + p * 32, ldc, 0, one, 32);
    dp_rows<8, 2>(one, m, pairs, Band{}, a, a_rs, a_qs, panels, c + p * 32, ldc, false);
  }
}

COHORT_DP_TARGET void dp_acc(int64_t m, int64_t n, int64_t pairs, const uint16_t* a, int64_t a_rs,
                             int64_t a_qs, const uint32_t* bp, float* c, int64_t ldc, Band band) {
  const int64_t panel_words = pairs * 32;
  int64_t p = 0;
  for (; (p + 2) * 32 <= n; p += 2) {
    const uint32_t* panels[2] = {bp + p * panel_words, bp + (p + 1) * panel_words};
    dp_rows<6, 4>(0, m, pairs, band, a, a_rs, a_qs, panels, c + p * 32, ldc, true);
  }
  if (p * 32 < n) {
    const uint32_t* panels[1] = {bp + p * panel_words};
    dp_rows<8, 2>(0, m, pairs, band, a, a_rs, a_qs, panels, c + p * 32, ldc, true);
  }
}

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

constexpr AttentionDpOps kDpOps{&dp_scores,
                                &dp_acc,
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
