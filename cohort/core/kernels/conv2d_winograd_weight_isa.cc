// Winograd F(4x4, 5x5) weight gradient on batch-16 buffers: every 4x4 block
// of output gradients and its 8x8 input tile are transformed, multiplied
// position by position and summed over blocks with the samples still in the
// vector lanes; the lanes are summed once per group, 16 sums at a time.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cohort/base/isa.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/conv2d_winograd.h"
#include "cohort/core/kernels/conv2d_winograd_transforms.h"
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

using namespace winograd;  // NOLINT: the transforms are this file's vocabulary

constexpr int64_t kBlock = 4;  // output x input channels per accumulator block

int64_t round4(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

#if defined(COHORT_ISA_AVX512)
// Returns s with s[k] = sum of the lanes of v[k], k < 16.
inline __m512 reduce16(const __m512 v[16]) {
  // Each level halves the partial sums per vector and doubles the vectors per
  // register; the lane order it leaves is fixed up by one permute at the end.
  __m512 w[8], z[4], y[2];
  for (int i = 0; i < 8; ++i)
    w[i] = vadd(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
  for (int i = 0; i < 4; ++i)
    z[i] = vadd(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xdd));
  for (int i = 0; i < 2; ++i) {
    const __m512d a = _mm512_castps_pd(z[2 * i]), b = _mm512_castps_pd(z[2 * i + 1]);
    y[i] = vadd(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 s = vadd(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xdd));
  static const __m512i order = [] {
    // Run the same tree on v[k] = k + 1 to learn where each sum lands.
    __m512 probe[16];
    for (int k = 0; k < 16; ++k) probe[k] = vset1(static_cast<float>(k + 1));
    __m512 pw[8], pz[4], py[2];
    for (int i = 0; i < 8; ++i)
      pw[i] = vadd(_mm512_shuffle_f32x4(probe[2 * i], probe[2 * i + 1], 0x44),
                   _mm512_shuffle_f32x4(probe[2 * i], probe[2 * i + 1], 0xee));
    for (int i = 0; i < 4; ++i)
      pz[i] = vadd(_mm512_shuffle_f32x4(pw[2 * i], pw[2 * i + 1], 0x88),
                   _mm512_shuffle_f32x4(pw[2 * i], pw[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; ++i) {
      const __m512d a = _mm512_castps_pd(pz[2 * i]), b = _mm512_castps_pd(pz[2 * i + 1]);
      py[i] = vadd(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                   _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    alignas(64) float lanes[16];
    vstore(lanes,
           vadd(_mm512_shuffle_ps(py[0], py[1], 0x88), _mm512_shuffle_ps(py[0], py[1], 0xdd)));
    alignas(64) int32_t idx[16];
    for (int lane = 0; lane < 16; ++lane) idx[static_cast<int>(lanes[lane] / 16.0f) - 1] = lane;
    return _mm512_load_si512(idx);
  }();
  return _mm512_permutexvar_ps(order, s);
}
#else
// Returns s with s[k] = sum of the lanes of v[k], k < 8.
inline __m256 reduce8(const __m256 v[8]) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  // a = [v0..v3 sums of the low 128 bits | of the high 128 bits], b likewise.
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
#endif

}  // namespace

int64_t winograd_what_floats(const WinogradConv& d) { return kPos * round4(d.oc) * round4(d.c); }

int64_t winograd_grad_floats(const WinogradConv& d, int64_t c) {
  return kPos * round4(c) * d.tiles_h * d.tiles_w * 16;
}

void winograd_grad_transform(const WinogradConv& d, int64_t c, const float* dy, float* dg) {
  const int64_t tiles = d.tiles_h * d.tiles_w, c4 = round4(c);
  const int64_t dy_w = 4 * d.tiles_w, dy_pitch = dy_w * 16;
  for (int64_t pos = 0; pos < kPos; ++pos)  // channels past c stay zero
    for (int64_t k = c; k < c4; ++k)
      std::fill_n(dg + (pos * c4 + k) * tiles * 16, tiles * 16, 0.0f);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t a = 0; a < d.tiles_h; ++a)
      for (int64_t b = 0; b < d.tiles_w; ++b)
        grad_transform(dy + ((k * 4 * d.tiles_h + 4 * a) * dy_w + 4 * b) * 16, dy_pitch,
                       dg + (k * tiles + a * d.tiles_w + b) * 16, c4 * tiles * 16);
}

// Tile rows transformed at a time: x's transform for a band of rows stays in
// L2 (about 256 KB) while every position of it is used, instead of the
// whole group's (megabytes) going out to L3 and back, which two threads then
// fight over. The lanes are summed once per band.
static int64_t band_rows(const WinogradConv& d) {
  constexpr int64_t kBandBytes = 256 * 1024;
  const int64_t row_bytes = kPos * round4(d.c) * d.tiles_w * 16 * 4;
  return std::clamp<int64_t>(kBandBytes / row_bytes, 1, d.tiles_h);
}

int64_t winograd_weight_scratch_floats(const WinogradConv& d) {
  // vx [64][c4][band tiles][16], then tmp.
  return (kPos * round4(d.c) * band_rows(d) * d.tiles_w +
          std::max<int64_t>(64, input_row_tmp_vecs(d.tiles_w))) *
         16;
}

void winograd_weight_group(const WinogradConv& d, const float* x, const float* dg, float* what,
                           float* scratch) {
  const int64_t tiles = d.tiles_h * d.tiles_w;
  const int64_t c4 = round4(d.c), oc4 = round4(d.oc);
  const int64_t rows = band_rows(d);
  float* vx = scratch;                                  // [64][c4][band tiles][16]
  float* tmp = vx + kPos * c4 * rows * d.tiles_w * 16;  // input_row_tmp_vecs
  const int64_t x_pitch = d.wp * 16;
  const int64_t ocb_n = oc4 / kBlock, cb_n = c4 / kBlock;
  for (int64_t a0 = 0; a0 < d.tiles_h; a0 += rows) {
    const int64_t a1 = std::min(d.tiles_h, a0 + rows), bt = (a1 - a0) * d.tiles_w;
    for (int64_t pos = 0; pos < kPos; ++pos)  // channels past c stay zero
      for (int64_t c = d.c; c < c4; ++c) std::fill_n(vx + (pos * c4 + c) * bt * 16, bt * 16, 0.0f);
    for (int64_t a = a0; a < a1; ++a)
      for (int64_t c = 0; c < d.c; ++c)
        input_transform_row(x + (c * d.hp + 4 * a) * x_pitch, x_pitch, d.tiles_w,
                            vx + (c * bt + (a - a0) * d.tiles_w) * 16, c4 * bt * 16, tmp);
    for (int64_t pos = 0; pos < kPos; ++pos) {
      const float* vp = vx + pos * c4 * bt * 16;
      const float* dp = dg + (pos * oc4 * tiles + a0 * d.tiles_w) * 16;
      for (int64_t ocb = 0; ocb < ocb_n; ++ocb)
        for (int64_t cb = 0; cb < cb_n; ++cb) {
          const float* dr = dp + ocb * kBlock * tiles * 16;
          const float* vr = vp + cb * kBlock * bt * 16;
          float* out = what + ((pos * ocb_n + ocb) * cb_n + cb) * 16;
#if defined(COHORT_ISA_AVX512)
          __m512 acc[16];
          for (int k = 0; k < 16; ++k) acc[k] = vzero();
          for (int64_t t = 0; t < bt; ++t) {
            __m512 dv[4], xv[4];
            for (int r = 0; r < 4; ++r) dv[r] = vload(dr + (r * tiles + t) * 16);
            for (int q = 0; q < 4; ++q) xv[q] = vload(vr + (q * bt + t) * 16);
            for (int r = 0; r < 4; ++r)
              for (int q = 0; q < 4; ++q) acc[r * 4 + q] = vfmadd(dv[r], xv[q], acc[r * 4 + q]);
          }
          vstore(out, vadd(vload(out), reduce16(acc)));
#else
          // Two output channels x four input channels at a time (8 of 16
          // ymm), both halves of each element into the same accumulator.
          for (int r0 = 0; r0 < 4; r0 += 2) {
            __m256 acc[8];
            for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
            for (int64_t t = 0; t < bt; ++t)
              for (int h = 0; h < 2; ++h) {
                __m256 dv[2], xv[4];
                for (int r = 0; r < 2; ++r)
                  dv[r] = _mm256_load_ps(dr + ((r0 + r) * tiles + t) * 16 + h * 8);
                for (int q = 0; q < 4; ++q) xv[q] = _mm256_load_ps(vr + (q * bt + t) * 16 + h * 8);
                for (int r = 0; r < 2; ++r)
                  for (int q = 0; q < 4; ++q)
                    acc[r * 4 + q] = _mm256_fmadd_ps(dv[r], xv[q], acc[r * 4 + q]);
              }
            float* o = out + r0 * 4;
            _mm256_store_ps(o, _mm256_add_ps(_mm256_load_ps(o), reduce8(acc)));
          }
#endif
        }
    }
  }
}

void winograd_weight_finish(const WinogradConv& d, const float* what, float* dw) {
  // Each what vector holds one position of 16 (oc, c) pairs: transform them
  // together, then scatter the lanes.
  const int64_t ocb_n = round4(d.oc) / kBlock, cb_n = round4(d.c) / kBlock;
  for (int64_t ocb = 0; ocb < ocb_n; ++ocb)
    for (int64_t cb = 0; cb < cb_n; ++cb) {
      alignas(64) float out[25][16];
      for (int h = 0; h < kHalves; ++h) {
        VN m[kPos];
        for (int pos = 0; pos < kPos; ++pos)
          m[pos] = vload(what + ((pos * ocb_n + ocb) * cb_n + cb) * 16 + h * kN);
        for (int y = 0; y < 5; ++y) {
          VN t[8];  // (G^T m)[y][j]
          for (int j = 0; j < 8; ++j) {
            t[j] = vzero();
            for (int i = 0; i < 8; ++i)
              if (kG[i][y] != 0.0)
                t[j] = vfmadd(vset1(static_cast<float>(kG[i][y])), m[i * 8 + j], t[j]);
          }
          for (int x = 0; x < 5; ++x) {
            VN s = vzero();
            for (int j = 0; j < 8; ++j)
              if (kG[j][x] != 0.0) s = vfmadd(t[j], vset1(static_cast<float>(kG[j][x])), s);
            vstore(out[y * 5 + x] + h * kN, s);
          }
        }
      }
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t oc = ocb * kBlock + lane / kBlock, c = cb * kBlock + lane % kBlock;
        if (oc >= d.oc || c >= d.c) continue;
        for (int e = 0; e < 25; ++e) dw[(oc * d.c + c) * 25 + e] = out[e][lane];
      }
    }
}

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
