// Packing to and from the batch-16 layout (conv2d_layout.h): 16 rows of 16
// floats at a time, transposed in registers (one 16x16 block on AVX-512,
// four 8x8 blocks on AVX2).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cohort/base/isa.h"
#include "cohort/core/kernels/conv2d_scratch.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/conv2d_layout.h"
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

// Columns [col, col + k) of 16 rows (null rows read as zero) -> k vectors at
// dst, dst + 16, ...
inline void rows_to_vecs(const float* const rows[16], const float* const masks[16], int64_t col,
                         int64_t k, float* dst) {
  // 16 interleaved streams are more than the hardware prefetchers follow:
  // ask for the lines two steps ahead.
  for (int i = 0; i < 16; ++i)
    if (rows[i]) _mm_prefetch(reinterpret_cast<const char*>(rows[i] + col + 32), _MM_HINT_T0);
  if (masks[0])
    for (int i = 0; i < 16; ++i)
      if (rows[i]) _mm_prefetch(reinterpret_cast<const char*>(masks[i] + col + 32), _MM_HINT_T0);
  for (int rb = 0; rb < 16; rb += kN)
    for (int cb = 0; cb < k; cb += kN) {
      const int64_t m = std::min<int64_t>(kN, k - cb);
      VN r[kN];
      for (int i = 0; i < kN; ++i) {
        const float* row = rows[rb + i];
        r[i] = row ? vload_first(row + col + cb, m) : vzero();
        // ReLU backward: keep where mask > 0 (a NaN mask keeps it too, as
        // PyTorch's threshold_backward does).
        if (row && masks[0]) r[i] = vkeep_positive(r[i], vload_first(masks[rb + i] + col + cb, m));
      }
      vtranspose(r);
      for (int64_t j = 0; j < m; ++j) vstore(dst + (cb + j) * 16 + rb, r[j]);
    }
}

// k vectors at src, src + 16, ... -> columns [col, col + k) of the non-null rows.
inline void vecs_to_rows(const float* src, int64_t k, float* const rows[16], int64_t col) {
  for (int i = 0; i < 16; ++i)
    if (rows[i]) _mm_prefetch(reinterpret_cast<const char*>(rows[i] + col + 32), _MM_HINT_ET0);
  for (int rb = 0; rb < 16; rb += kN)
    for (int cb = 0; cb < k; cb += kN) {
      const int64_t m = std::min<int64_t>(kN, k - cb);
      VN r[kN];
      for (int64_t j = 0; j < kN; ++j) r[j] = j < m ? vload(src + (cb + j) * 16 + rb) : vzero();
      vtranspose(r);
      for (int i = 0; i < kN; ++i)
        if (rows[rb + i]) vstore_first(rows[rb + i] + col + cb, m, r[i]);
    }
}

}  // namespace

void pack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, Padding pad,
                  int64_t g0, int64_t g1, float* dst, const float* mask) {
  const int64_t wp = pad.left + w + pad.right;
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
      float* out = dst + ((g - g0) * c + ch) * (pad.top + h + pad.bottom) * wp * 16;
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

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
