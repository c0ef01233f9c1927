// Winograd F(4x4, 5x5) weight gradient on batch-16 buffers: every 4x4 block
// of output gradients and its 8x8 input tile are transformed, multiplied
// position by position and summed over blocks with the 16 samples still in
// the vector lanes; the lanes are summed once per group, 16 sums at a time.
// AVX-512 only: without it (COHORT_NATIVE=OFF on an older target) the
// batch-16 paths are compiled out and conv2d.cc uses im2col throughout.
#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused
// merge source, which -Wmaybe-uninitialized reports inside inlined code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cohort/core/kernels/conv2d_winograd.h"

#include <immintrin.h>
#include <algorithm>

#include "cohort/core/kernels/conv2d_winograd_transforms.h"

namespace cohort::kernels::detail {
namespace {

using namespace winograd;  // NOLINT: the transforms are this file's vocabulary

constexpr int64_t kBlock = 4;  // output x input channels per accumulator block

int64_t round4(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// Returns s with s[k] = sum of the lanes of v[k], k < 16.
inline __m512 reduce16(const __m512 v[16]) {
  // Each level halves the partial sums per vector and doubles the vectors per
  // register; the lane order it leaves is fixed up by one permute at the end.
  __m512 w[8], z[4], y[2];
  for (int i = 0; i < 8; ++i)
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
  for (int i = 0; i < 4; ++i)
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xdd));
  for (int i = 0; i < 2; ++i) {
    const __m512d a = _mm512_castps_pd(z[2 * i]), b = _mm512_castps_pd(z[2 * i + 1]);
    y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 s =
      _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xdd));
  static const __m512i order = [] {
    // Run the same tree on v[k] = k + 1 to learn where each sum lands.
    __m512 probe[16];
    for (int k = 0; k < 16; ++k) probe[k] = _mm512_set1_ps(static_cast<float>(k + 1));
    __m512 pw[8], pz[4], py[2];
    for (int i = 0; i < 8; ++i)
      pw[i] = _mm512_add_ps(_mm512_shuffle_f32x4(probe[2 * i], probe[2 * i + 1], 0x44),
                            _mm512_shuffle_f32x4(probe[2 * i], probe[2 * i + 1], 0xee));
    for (int i = 0; i < 4; ++i)
      pz[i] = _mm512_add_ps(_mm512_shuffle_f32x4(pw[2 * i], pw[2 * i + 1], 0x88),
                            _mm512_shuffle_f32x4(pw[2 * i], pw[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; ++i) {
      const __m512d a = _mm512_castps_pd(pz[2 * i]), b = _mm512_castps_pd(pz[2 * i + 1]);
      py[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                            _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_shuffle_ps(py[0], py[1], 0x88),
                                         _mm512_shuffle_ps(py[0], py[1], 0xdd)));
    alignas(64) int32_t idx[16];
    for (int lane = 0; lane < 16; ++lane) idx[static_cast<int>(lanes[lane] / 16.0f) - 1] = lane;
    return _mm512_load_si512(idx);
  }();
  return _mm512_permutexvar_ps(order, s);
}

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

int64_t winograd_weight_scratch_floats(const WinogradConv& d) {
  const int64_t tiles = d.tiles_h * d.tiles_w;
  // vx [64][c4][tiles][16], then tmp.
  return (kPos * round4(d.c) * tiles + std::max<int64_t>(64, input_row_tmp_vecs(d.tiles_w))) * 16;
}

void winograd_weight_group(const WinogradConv& d, const float* x, const float* dg, float* what,
                           float* scratch) {
  const int64_t tiles = d.tiles_h * d.tiles_w;
  const int64_t c4 = round4(d.c), oc4 = round4(d.oc);
  float* vx = scratch;                       // [64][c4][tiles][16]
  float* tmp = vx + kPos * c4 * tiles * 16;  // input_row_tmp_vecs
  const int64_t x_pitch = d.wp * 16;
  for (int64_t pos = 0; pos < kPos; ++pos)  // channels past c stay zero
    for (int64_t c = d.c; c < c4; ++c)
      std::fill_n(vx + (pos * c4 + c) * tiles * 16, tiles * 16, 0.0f);
  for (int64_t a = 0; a < d.tiles_h; ++a)
    for (int64_t c = 0; c < d.c; ++c)
      input_transform_row(x + (c * d.hp + 4 * a) * x_pitch, x_pitch, d.tiles_w,
                          vx + (c * tiles + a * d.tiles_w) * 16, c4 * tiles * 16, tmp);
  const int64_t ocb_n = oc4 / kBlock, cb_n = c4 / kBlock;
  for (int64_t pos = 0; pos < kPos; ++pos) {
    const float* vp = vx + pos * c4 * tiles * 16;
    const float* dp = dg + pos * oc4 * tiles * 16;
    for (int64_t ocb = 0; ocb < ocb_n; ++ocb)
      for (int64_t cb = 0; cb < cb_n; ++cb) {
        __m512 acc[16];
        for (int k = 0; k < 16; ++k) acc[k] = _mm512_setzero_ps();
        const float* dr = dp + ocb * kBlock * tiles * 16;
        const float* vr = vp + cb * kBlock * tiles * 16;
        for (int64_t t = 0; t < tiles; ++t) {
          __m512 dv[4], xv[4];
          for (int r = 0; r < 4; ++r) dv[r] = _mm512_load_ps(dr + (r * tiles + t) * 16);
          for (int q = 0; q < 4; ++q) xv[q] = _mm512_load_ps(vr + (q * tiles + t) * 16);
          for (int r = 0; r < 4; ++r)
            for (int q = 0; q < 4; ++q)
              acc[r * 4 + q] = _mm512_fmadd_ps(dv[r], xv[q], acc[r * 4 + q]);
        }
        float* out = what + ((pos * ocb_n + ocb) * cb_n + cb) * 16;
        _mm512_store_ps(out, _mm512_add_ps(_mm512_load_ps(out), reduce16(acc)));
      }
  }
}

void winograd_weight_finish(const WinogradConv& d, const float* what, float* dw) {
  // Each what vector holds one position of 16 (oc, c) pairs: transform them
  // together, then scatter the lanes.
  const int64_t ocb_n = round4(d.oc) / kBlock, cb_n = round4(d.c) / kBlock;
  for (int64_t ocb = 0; ocb < ocb_n; ++ocb)
    for (int64_t cb = 0; cb < cb_n; ++cb) {
      __m512 m[kPos];
      for (int pos = 0; pos < kPos; ++pos)
        m[pos] = _mm512_load_ps(what + ((pos * ocb_n + ocb) * cb_n + cb) * 16);
      alignas(64) float out[25][16];
      for (int y = 0; y < 5; ++y) {
        __m512 t[8];  // (G^T m)[y][j]
        for (int j = 0; j < 8; ++j) {
          t[j] = _mm512_setzero_ps();
          for (int i = 0; i < 8; ++i)
            if (kG[i][y] != 0.0)
              t[j] =
                  _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(kG[i][y])), m[i * 8 + j], t[j]);
        }
        for (int x = 0; x < 5; ++x) {
          __m512 s = _mm512_setzero_ps();
          for (int j = 0; j < 8; ++j)
            if (kG[j][x] != 0.0)
              s = _mm512_fmadd_ps(t[j], _mm512_set1_ps(static_cast<float>(kG[j][x])), s);
          _mm512_store_ps(out[y * 5 + x], s);
        }
      }
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t oc = ocb * kBlock + lane / kBlock, c = cb * kBlock + lane % kBlock;
        if (oc >= d.oc || c >= d.c) continue;
        for (int e = 0; e < 25; ++e) dw[(oc * d.c + c) * 25 + e] = out[e][lane];
      }
    }
}

}  // namespace cohort::kernels::detail

#endif  // defined(__AVX512F__)
