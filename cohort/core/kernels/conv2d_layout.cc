// AVX-512 only: without it (COHORT_NATIVE=OFF on an older target) the
// batch-16 paths are compiled out and conv2d.cc uses im2col throughout.
#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused
// merge source, which -Wmaybe-uninitialized reports inside inlined code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cohort/core/kernels/conv2d_layout.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace cohort::kernels::detail {
namespace {

// In-register transpose of a 16x16 block of floats.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int j = 0; j < 2; ++j) {
      __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}

inline __mmask16 first_k(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

// Columns [col, col + k) of 16 rows (null rows read as zero) -> k vectors at
// dst, dst + 16, ...
inline void rows_to_vecs(const float* const rows[16], const float* const masks[16], int64_t col,
                         int64_t k, float* dst) {
  __m512 r[16];
  const __mmask16 m = first_k(k);
  // 16 interleaved streams are more than the hardware prefetchers follow:
  // ask for the lines two steps ahead.
  for (int i = 0; i < 16; ++i)
    if (rows[i]) _mm_prefetch(reinterpret_cast<const char*>(rows[i] + col + 32), _MM_HINT_T0);
  for (int i = 0; i < 16; ++i)
    r[i] = rows[i] ? _mm512_maskz_loadu_ps(m, rows[i] + col) : _mm512_setzero_ps();
  if (masks[0]) {
    // ReLU backward: keep where mask > 0 (a NaN mask keeps it too, as
    // PyTorch's threshold_backward does).
    const __m512 zero = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i)
      if (rows[i]) {
        _mm_prefetch(reinterpret_cast<const char*>(masks[i] + col + 32), _MM_HINT_T0);
        const __m512 mv = _mm512_maskz_loadu_ps(m, masks[i] + col);
        r[i] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mv, zero, _CMP_NLE_UQ), r[i]);
      }
  }
  transpose16(r);
  for (int64_t j = 0; j < k; ++j) _mm512_store_ps(dst + j * 16, r[j]);
}

// k vectors at src, src + 16, ... -> columns [col, col + k) of the non-null rows.
inline void vecs_to_rows(const float* src, int64_t k, float* const rows[16], int64_t col) {
  __m512 r[16];
  for (int64_t j = 0; j < 16; ++j)
    r[j] = j < k ? _mm512_load_ps(src + j * 16) : _mm512_setzero_ps();
  transpose16(r);
  const __mmask16 m = first_k(k);
  for (int i = 0; i < 16; ++i)
    if (rows[i]) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + col + 32), _MM_HINT_ET0);
      _mm512_mask_storeu_ps(rows[i] + col, m, r[i]);
    }
}

}  // namespace

float* ensure_vecs(std::vector<Vec16>& buf, int64_t vecs) {
  if (static_cast<int64_t>(buf.size()) < vecs) {
    buf = std::vector<Vec16>();
    buf.resize(vecs);
  }
  return reinterpret_cast<float*>(buf.data());
}

void pack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, Padding pad,
                  int64_t g0, int64_t g1, float* dst, const float* mask) {
  const int64_t wp = pad.left + w + pad.right, hp = pad.top + h + pad.bottom;
  const int64_t plane = h * w;
  const float* rows[16];
  const float* masks[16] = {};
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int i = 0; i < 16; ++i) {
        const int64_t s = g * 16 + i;
        rows[i] = s < n ? src + (s * c + ch) * plane : nullptr;
        if (mask) masks[i] = s < n ? mask + (s * c + ch) * plane : mask;
      }
      float* out = dst + ((g - g0) * c + ch) * hp * wp * 16;
      std::memset(out, 0, sizeof(float) * 16 * wp * pad.top);
      std::memset(out + (pad.top + h) * wp * 16, 0, sizeof(float) * 16 * wp * pad.bottom);
      out += pad.top * wp * 16;
      if (pad.left == 0 && pad.right == 0) {
        // Unpadded rows are contiguous: transpose the plane as one long row.
        for (int64_t col = 0; col < plane; col += 16)
          rows_to_vecs(rows, masks, col, std::min<int64_t>(16, plane - col), out + col * 16);
        continue;
      }
      for (int64_t y = 0; y < h; ++y) {
        float* orow = out + y * wp * 16;
        std::memset(orow, 0, sizeof(float) * 16 * pad.left);
        std::memset(orow + (pad.left + w) * 16, 0, sizeof(float) * 16 * pad.right);
        for (int64_t col = 0; col < w; col += 16)
          rows_to_vecs(rows, masks, y * w + col, std::min<int64_t>(16, w - col),
                       orow + (pad.left + col) * 16);
      }
    }
  }
}

void unpack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, Padding pad,
                    int64_t g0, int64_t g1, float* dst) {
  const int64_t plane = h * w;
  const int64_t wp = pad.left + w + pad.right, hp = pad.top + h + pad.bottom;
  const bool flat = pad.left == 0 && pad.right == 0;
  float* rows[16];
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int i = 0; i < 16; ++i) {
        const int64_t s = g * 16 + i;
        rows[i] = s < n ? dst + (s * c + ch) * plane : nullptr;
      }
      const float* in = src + (((g - g0) * c + ch) * hp + pad.top) * wp * 16;
      if (flat) {
        for (int64_t col = 0; col < plane; col += 16)
          vecs_to_rows(in + col * 16, std::min<int64_t>(16, plane - col), rows, col);
        continue;
      }
      for (int64_t y = 0; y < h; ++y)
        for (int64_t col = 0; col < w; col += 16)
          vecs_to_rows(in + (y * wp + pad.left + col) * 16, std::min<int64_t>(16, w - col), rows,
                       y * w + col);
    }
  }
}

namespace {

struct ScratchPool {
  std::mutex mu;
  std::vector<std::unique_ptr<ScratchLease::Buffers>> free;
};

ScratchPool& scratch_pool() {
  static ScratchPool pool;
  return pool;
}

}  // namespace

ScratchLease::ScratchLease() {
  ScratchPool& pool = scratch_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (!pool.free.empty()) {
      s_ = std::move(pool.free.back());
      pool.free.pop_back();
    }
  }
  if (!s_) s_ = std::make_unique<Buffers>();
}

ScratchLease::~ScratchLease() {
  ScratchPool& pool = scratch_pool();
  std::lock_guard<std::mutex> lock(pool.mu);
  try {
    pool.free.push_back(std::move(s_));
  } catch (...) {
    // Out of memory growing the free list: the buffers are simply freed.
  }
}

float* ScratchLease::get(int i, int64_t floats) {
  return ensure_vecs(s_->buf[i], (floats + kLanes - 1) / kLanes);
}

}  // namespace cohort::kernels::detail

#endif  // defined(__AVX512F__)
