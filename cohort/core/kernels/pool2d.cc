// Fast max pooling: planes split over the caller's thread budget, with a
// vectorized path for the usual 2x2 / stride 2 window.
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused
// merge source, which -Wmaybe-uninitialized reports inside inlined code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cohort/core/kernels/pool2d.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cohort/base/parallel.h"

namespace cohort::kernels {
namespace {

void pool_plane(const Pool2dGeometry& g, const float* xp, float* yp, int32_t* ap) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    const int64_t h_lo = oh * g.stride_h - g.pad_h;
    const int64_t ih0 = std::max<int64_t>(h_lo, 0);
    const int64_t ih1 = std::min<int64_t>(h_lo + g.kernel_h, g.in_h);
    for (int64_t ow = 0; ow < ow_n; ++ow) {
      const int64_t w_lo = ow * g.stride_w - g.pad_w;
      const int64_t iw0 = std::max<int64_t>(w_lo, 0);
      const int64_t iw1 = std::min<int64_t>(w_lo + g.kernel_w, g.in_w);
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_i = ih0 * g.in_w + iw0;
      for (int64_t ih = ih0; ih < ih1; ++ih) {
        const float* row = xp + ih * g.in_w;
        for (int64_t iw = iw0; iw < iw1; ++iw) {
          const float v = row[iw];
          if (v > best || std::isnan(v)) {
            best = v;
            best_i = ih * g.in_w + iw;
          }
        }
      }
      yp[oh * ow_n + ow] = best;
      ap[oh * ow_n + ow] = static_cast<int32_t>(best_i);
    }
  }
}

#if defined(__AVX512F__)
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

#endif  // defined(__AVX512F__)

}  // namespace

void max_pool2d_forward(const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax) {
  check_pool2d_geometry(g, "max_pool2d_forward");
  const int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
  const int64_t planes = g.batch * g.channels;
  [[maybe_unused]] const bool fast_2x2 = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 &&
                                         g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0;
  parallel_for(0, planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane_in, 1)),
               [&](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p) {
#if defined(__AVX512F__)
                   if (fast_2x2) {
                     pool_plane_2x2(g, x + p * plane_in, y + p * plane_out, argmax + p * plane_out);
                     continue;
                   }
#endif
                   pool_plane(g, x + p * plane_in, y + p * plane_out, argmax + p * plane_out);
                 }
               });
}

void max_pool2d_backward(const Pool2dGeometry& g, const float* dy, const int32_t* argmax,
                         float* dx) {
  check_pool2d_geometry(g, "max_pool2d_backward");
  const int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
  const int64_t planes = g.batch * g.channels;
  [[maybe_unused]] const bool fast_2x2 = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 &&
                                         g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0;
  parallel_for(0, planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane_in, 1)),
               [&](int64_t p0, int64_t p1) {
#if defined(__AVX512F__)
                 if (fast_2x2) {
                   for (int64_t p = p0; p < p1; ++p)
                     unpool_plane_2x2(g, dy + p * plane_out, argmax + p * plane_out,
                                      dx + p * plane_in);
                   return;
                 }
#endif
                 std::memset(dx + p0 * plane_in, 0, sizeof(float) * (p1 - p0) * plane_in);
                 for (int64_t p = p0; p < p1; ++p) {
                   float* dxp = dx + p * plane_in;
                   const float* dyp = dy + p * plane_out;
                   const int32_t* ap = argmax + p * plane_out;
                   for (int64_t o = 0; o < plane_out; ++o) dxp[ap[o]] += dyp[o];
                 }
               });
}

}  // namespace cohort::kernels
