// gemm_kernels.h's microkernel for one ISA: a register tile of MR x (NV
// vectors) accumulators, one broadcast of A and NV loads of B per step of k.
// AVX2: 6 x 16 (12 ymm accumulators + 2 B + 1 broadcast of 16 registers);
// AVX-512: 12 x 32 (24 zmm accumulators + 2 + 1 of 32). And the packing of
// the operands into the layout it reads, the strided cases (rows of A along
// k, columns of B along k) through 8 x 8 in-register transposes.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cohort/base/isa.h"
#include "cohort/core/native/gemm_kernels.h"

COHORT_ISA_BEGIN
namespace cohort::native::COHORT_ISA_NS {
namespace {

#if defined(COHORT_ISA_AVX512)
using V = __m512;
constexpr int kW = 16, kMR = 12;
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vbcast(const float* p) { return _mm512_set1_ps(*p); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline V vzero() { return _mm512_setzero_ps(); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
#else
using V = __m256;
constexpr int kW = 8, kMR = 6;
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vbcast(const float* p) { return _mm256_broadcast_ss(p); }
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vzero() { return _mm256_setzero_ps(); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
#endif
constexpr int kNV = 2, kNR = kNV * kW;

void micro(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* c,
           int64_t ldc, int m, int n, float alpha, float beta, bool first) {
  // Fully unrolled early, so that GCC keeps acc in registers (without the
  // pragmas it stores every accumulator to the stack on every step).
  // C's tile is read after the loop (when accumulating): fetch it now.
  if (!first || beta != 0.0f)
    for (int i = 0; i < m; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNR - 1), _MM_HINT_T0);
    }
  V acc[kMR][kNV];
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[i][v] = vzero();
  for (int64_t p = 0; p < kc; ++p) {
    V b[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) b[v] = vload(bp + v * kW);
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      const V a = vbcast(ap + i);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[i][v] = vfma(a, b[v], acc[i][v]);
    }
    ap += kMR;
    bp += kNR;
  }
  // alpha * acc through a buffer (keeps the accumulators in registers: GCC
  // spills an array whose address escapes), then into C.
  alignas(64) float tile[kMR * kNR];
  const V va = vset1(alpha);
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) vstore(tile + i * kNR + v * kW, vmul(acc[i][v], va));
  if (m == kMR && n == kNR) {
    const V vb = vset1(beta);
    for (int i = 0; i < kMR; ++i)
      for (int v = 0; v < kNV; ++v) {
        float* p = c + i * ldc + v * kW;
        V r = vload(tile + i * kNR + v * kW);
        if (!first)
          r = r + vload(p);
        else if (beta != 0.0f)
          r = vfma(vload(p), vb, r);
        vstore(p, r);
      }
    return;
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float& out = c[i * ldc + j];
      const float r = tile[i * kNR + j];
      out = !first ? r + out : beta != 0.0f ? __builtin_fmaf(out, beta, r) : r;
    }
}

// r[t] = column t of the 8 x 8 block whose rows are r[0..7].
inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// `rows` (<= width) source rows src[r * ld + p], p < kc, into dst[p * width + r]
// (zero for rows >= rows). Blocks of 8 p go through transposes, stored 8
// floats at a time in increasing order: a group's store may run past `width`
// into the next p's slot, which the next store overwrites; the caller's
// buffer has kPackSlack floats after the panel for the last one.
template <int kWidth>
void pack_rows(const float* src, int64_t ld, int rows, int64_t kc, float* dst) {
  constexpr int kGroups = (kWidth + 7) / 8;
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    __m256 g[kGroups][8];
    for (int q = 0; q < kGroups; ++q)
      for (int r = 0; r < 8; ++r) {
        const int row = q * 8 + r;
        g[q][r] =
            row < rows && row < kWidth ? _mm256_loadu_ps(src + row * ld + p) : _mm256_setzero_ps();
      }
    for (int q = 0; q < kGroups; ++q) transpose8(g[q]);
    for (int t = 0; t < 8; ++t)
      for (int q = 0; q < kGroups; ++q) _mm256_storeu_ps(dst + (p + t) * kWidth + q * 8, g[q][t]);
  }
  for (; p < kc; ++p)
    for (int r = 0; r < kWidth; ++r) dst[p * kWidth + r] = r < rows ? src[r * ld + p] : 0.0f;
}

// `cols` (<= width) floats of each of kc rows src[p * ld + j] into
// dst[p * width + j], zero past cols.
template <int kWidth>
void pack_cols(const float* src, int64_t ld, int cols, int64_t kc, float* dst) {
  for (int64_t p = 0; p < kc; ++p) {
    float* d = dst + p * kWidth;
    if (cols == kWidth) {
      std::memcpy(d, src + p * ld, sizeof(float) * kWidth);  // a fixed size: inlined
      continue;
    }
    for (int j = 0; j < kWidth; ++j) d[j] = j < cols ? src[p * ld + j] : 0.0f;
  }
}

void pack_a(bool ta, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
            float* ap) {
  if (ta) {  // op(A)(i, p) = a[p * lda + i]: one pass over each row of a
    const int64_t full = mc / kMR * kMR;
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = a + (p0 + p) * lda + i0;
      for (int64_t ib = 0; ib < full; ib += kMR)
        std::memcpy(ap + ib * kc + p * kMR, src + ib, sizeof(float) * kMR);
      if (full < mc) {
        float* d = ap + full * kc + p * kMR;
        for (int r = 0; r < kMR; ++r) d[r] = full + r < mc ? src[full + r] : 0.0f;
      }
    }
    return;
  }
  for (int64_t ib = 0; ib < mc; ib += kMR)
    pack_rows<kMR>(a + (i0 + ib) * lda + p0, lda, static_cast<int>(std::min<int64_t>(kMR, mc - ib)),
                   kc, ap + ib * kc);
}

void pack_b(bool tb, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
            float* bp) {
  for (int64_t jb = 0; jb < nc; jb += kNR) {
    const int cols = static_cast<int>(std::min<int64_t>(kNR, nc - jb));
    if (tb)  // op(B)(p, j) = b[j * ldb + p]
      pack_rows<kNR>(b + (j0 + jb) * ldb + p0, ldb, cols, kc, bp + jb * kc);
    else
      pack_cols<kNR>(b + p0 * ldb + j0 + jb, ldb, cols, kc, bp + jb * kc);
  }
}

}  // namespace

extern const GemmKernels kGemmKernels;
const GemmKernels kGemmKernels{kMR, kNR, &micro, &pack_a, &pack_b};

}  // namespace cohort::native::COHORT_ISA_NS
COHORT_ISA_END
