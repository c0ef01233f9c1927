// Vectorized max_pool2d planes for the 2x2 / stride 2 / no-padding window
// (pool2d_fast.h), one copy per ISA.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cohort/base/isa.h"
#include "cohort/core/kernels/pool2d.h"
#include "cohort/core/kernels/pool2d_fast.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

#if defined(COHORT_ISA_AVX512)
// Kernel 2x2, stride 2, no padding (the common case, and Net's): 16 outputs
// per step from two pairs of input vectors split into even and odd columns.
void pool_plane_2x2(const Pool2dGeometry& g, const float* xp, float* yp, int32_t* ap) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), w = g.in_w;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i two_lanes = even;  // output lane j reads input column 2j
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    const float* r0 = xp + 2 * oh * w;
    const float* r1 = r0 + w;
    for (int64_t ow = 0; ow < ow_n; ow += 16) {
      const int64_t n = std::min<int64_t>(16, ow_n - ow);
      // 2n input columns starting at 2*ow; the masks keep reads in the row.
      const __mmask16 m_lo = static_cast<__mmask16>(n >= 8 ? 0xffff : (1u << (2 * n)) - 1u);
      const __mmask16 m_hi = static_cast<__mmask16>(n <= 8 ? 0 : (1u << (2 * n - 16)) - 1u);
      const __mmask16 m_out = static_cast<__mmask16>((1u << n) - 1u);
      const __m512 a0 = _mm512_maskz_loadu_ps(m_lo, r0 + 2 * ow);
      const __m512 a1 = _mm512_maskz_loadu_ps(m_hi, r0 + 2 * ow + 16);
      const __m512 b0 = _mm512_maskz_loadu_ps(m_lo, r1 + 2 * ow);
      const __m512 b1 = _mm512_maskz_loadu_ps(m_hi, r1 + 2 * ow + 16);
      const __m512 cand[4] = {
          _mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
          _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
      const __m512i base =
          _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oh * w + 2 * ow)), two_lanes);
      const int32_t off[4] = {0, 1, static_cast<int32_t>(w), static_cast<int32_t>(w + 1)};
      __m512 best = cand[0];
      __m512i idx = base;
      for (int k = 1; k < 4; ++k) {
        // PyTorch's rule: a larger value or any NaN replaces the best.
        const __mmask16 take = _mm512_cmp_ps_mask(cand[k], best, _CMP_GT_OQ) |
                               _mm512_cmp_ps_mask(cand[k], cand[k], _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, take, cand[k]);
        idx = _mm512_mask_mov_epi32(idx, take, _mm512_add_epi32(base, _mm512_set1_epi32(off[k])));
      }
      _mm512_mask_storeu_ps(yp + oh * ow_n + ow, m_out, best);
      _mm512_mask_storeu_epi32(ap + oh * ow_n + ow, m_out, idx);
    }
  }
}

// Backward of the 2x2 / stride 2 / no-padding case: windows do not overlap,
// so every input element gets its window's gradient or zero and dx is written
// once, row pair by row pair, with no clearing pass and no scatter. argmax
// must come from max_pool2d_forward with the same geometry.
void unpool_plane_2x2(const Pool2dGeometry& g, const float* dyp, const int32_t* ap, float* dxp) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), w = g.in_w;
  const __m512i lanes2 =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  // Interleave even (a) and odd (b) columns: lo = a0 b0 a1 b1 ... a7 b7, hi = a8 b8 ...
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    float* r0 = dxp + 2 * oh * w;
    float* r1 = r0 + w;
    for (int64_t ow = 0; ow < ow_n; ow += 16) {
      const int64_t n = std::min<int64_t>(16, ow_n - ow);
      const __mmask16 m_in = static_cast<__mmask16>((1u << n) - 1u);
      const __mmask16 m_lo = static_cast<__mmask16>(n >= 8 ? 0xffff : (1u << (2 * n)) - 1u);
      const __mmask16 m_hi = static_cast<__mmask16>(n <= 8 ? 0 : (1u << (2 * n - 16)) - 1u);
      const __m512 d = _mm512_maskz_loadu_ps(m_in, dyp + oh * ow_n + ow);
      const __m512i a = _mm512_maskz_loadu_epi32(m_in, ap + oh * ow_n + ow);
      const __m512i base =
          _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oh * w + 2 * ow)), lanes2);
      const int32_t off[4] = {0, 1, static_cast<int32_t>(w), static_cast<int32_t>(w + 1)};
      __m512 v[4];
      for (int k = 0; k < 4; ++k)
        v[k] = _mm512_maskz_mov_ps(
            _mm512_cmpeq_epi32_mask(a, _mm512_add_epi32(base, _mm512_set1_epi32(off[k]))), d);
      _mm512_mask_storeu_ps(r0 + 2 * ow, m_lo, _mm512_permutex2var_ps(v[0], lo, v[1]));
      _mm512_mask_storeu_ps(r0 + 2 * ow + 16, m_hi, _mm512_permutex2var_ps(v[0], hi, v[1]));
      _mm512_mask_storeu_ps(r1 + 2 * ow, m_lo, _mm512_permutex2var_ps(v[2], lo, v[3]));
      _mm512_mask_storeu_ps(r1 + 2 * ow + 16, m_hi, _mm512_permutex2var_ps(v[2], hi, v[3]));
    }
    // An odd last column belongs to no window.
    for (int64_t x = 2 * ow_n; x < w; ++x) r0[x] = r1[x] = 0.0f;
  }
  // As does an odd last row.
  std::memset(dxp + 2 * oh_n * w, 0, sizeof(float) * (g.in_h - 2 * oh_n) * w);
}

#else
// Kernel 2x2, stride 2, no padding: 8 outputs per step from two pairs of
// input vectors split into even and odd columns.
void pool_plane_2x2(const Pool2dGeometry& g, const float* xp, float* yp, int32_t* ap) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), w = g.in_w;
  const __m256i two_lanes = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  auto evens = [](__m256 lo, __m256 hi) {
    return _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
  };
  auto odds = [](__m256 lo, __m256 hi) {
    return _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8));
  };
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    const float* r0 = xp + 2 * oh * w;
    const float* r1 = r0 + w;
    for (int64_t ow = 0; ow < ow_n; ow += 8) {
      const int64_t n = std::min<int64_t>(8, ow_n - ow);
      // 2n input columns starting at 2*ow; partial loads keep reads in the row.
      const int64_t n_lo = std::min<int64_t>(8, 2 * n), n_hi = 2 * n - n_lo;
      const __m256 a0 = vload_first(r0 + 2 * ow, n_lo), a1 = vload_first(r0 + 2 * ow + 8, n_hi);
      const __m256 b0 = vload_first(r1 + 2 * ow, n_lo), b1 = vload_first(r1 + 2 * ow + 8, n_hi);
      const __m256 cand[4] = {evens(a0, a1), odds(a0, a1), evens(b0, b1), odds(b0, b1)};
      const __m256i base =
          _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(2 * oh * w + 2 * ow)), two_lanes);
      const int32_t off[4] = {0, 1, static_cast<int32_t>(w), static_cast<int32_t>(w + 1)};
      __m256 best = cand[0];
      __m256 idx = _mm256_castsi256_ps(base);
      for (int k = 1; k < 4; ++k) {
        // PyTorch's rule: a larger value or any NaN replaces the best.
        const __m256 take = _mm256_or_ps(_mm256_cmp_ps(cand[k], best, _CMP_GT_OQ),
                                         _mm256_cmp_ps(cand[k], cand[k], _CMP_UNORD_Q));
        best = _mm256_blendv_ps(best, cand[k], take);
        idx = _mm256_blendv_ps(
            idx, _mm256_castsi256_ps(_mm256_add_epi32(base, _mm256_set1_epi32(off[k]))), take);
      }
      vstore_first(yp + oh * ow_n + ow, n, best);
      _mm256_maskstore_epi32(ap + oh * ow_n + ow, first_k(n), _mm256_castps_si256(idx));
    }
  }
}

// Backward of the 2x2 / stride 2 / no-padding case: windows do not overlap,
// so every input element gets its window's gradient or zero and dx is written
// once, row pair by row pair, with no clearing pass and no scatter.
void unpool_plane_2x2(const Pool2dGeometry& g, const float* dyp, const int32_t* ap, float* dxp) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), w = g.in_w;
  const __m256i lanes2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    float* r0 = dxp + 2 * oh * w;
    float* r1 = r0 + w;
    for (int64_t ow = 0; ow < ow_n; ow += 8) {
      const int64_t n = std::min<int64_t>(8, ow_n - ow);
      const int64_t n_lo = std::min<int64_t>(8, 2 * n), n_hi = 2 * n - n_lo;
      const __m256 d = vload_first(dyp + oh * ow_n + ow, n);
      const __m256i a = _mm256_maskload_epi32(ap + oh * ow_n + ow, first_k(n));
      const __m256i base =
          _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(2 * oh * w + 2 * ow)), lanes2);
      const int32_t off[4] = {0, 1, static_cast<int32_t>(w), static_cast<int32_t>(w + 1)};
      __m256 v[4];
      for (int k = 0; k < 4; ++k)
        v[k] = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(
                                 a, _mm256_add_epi32(base, _mm256_set1_epi32(off[k])))),
                             d);
      // Interleave even (v0, v2) and odd (v1, v3) columns back into rows.
      for (int rr = 0; rr < 2; ++rr) {
        const __m256 lo = _mm256_unpacklo_ps(v[2 * rr], v[2 * rr + 1]);
        const __m256 hi = _mm256_unpackhi_ps(v[2 * rr], v[2 * rr + 1]);
        float* row = rr == 0 ? r0 : r1;
        vstore_first(row + 2 * ow, n_lo, _mm256_permute2f128_ps(lo, hi, 0x20));
        if (n_hi > 0) vstore_first(row + 2 * ow + 8, n_hi, _mm256_permute2f128_ps(lo, hi, 0x31));
      }
    }
    // An odd last column belongs to no window.
    for (int64_t x = 2 * ow_n; x < w; ++x) r0[x] = r1[x] = 0.0f;
  }
  // As does an odd last row.
  std::memset(dxp + 2 * oh_n * w, 0, sizeof(float) * (g.in_h - 2 * oh_n) * w);
}
#endif

}  // namespace

extern const Pool2dFastOps kPool2dFastOps;
const Pool2dFastOps kPool2dFastOps{&pool_plane_2x2, &unpool_plane_2x2};

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
