// The kAvx512Bf16 path of linalg_bf16.h: cohort's own packed bf16 GEMM on
// AVX512-BF16's vdpbf16ps (16 lanes, each adding two bf16 x bf16 products to
// a float32 accumulator: twice a float32 FMA's multiply-adds), in
// gemm_blocked.h's loop nest.
//
// Register tile 12 x 32 (24 zmm accumulators, 2 of B, 1 broadcast of A), as
// the float32 AVX-512 kernel. Panels hold k in pairs: B's panel stores, per
// pair q, the 32-bit words (B(2q, j), B(2q+1, j)) of its 32 columns in order;
// A's stores (A(i, 2q), A(i, 2q+1)) of its 12 rows, broadcast one word at a
// time. A k that is odd is padded with a zero (the product adds nothing).
// The operand that runs along k in memory (A untransposed, B transposed) is
// packed through 16 x 16 transposes of 32-bit words (a pair is one word
// there); the other by widening two rows and interleaving them.
//
// Why not oneDNN alone: measured on the GPT's shapes (bench_gemm_shapes
// --bf16), see docs/precision.md. Compiled with function target attributes
// (not the *_isa.cc copies: the avx512 copy also runs on CPUs without
// AVX512-BF16); callers check cpu_features().avx512_bf16 first.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cohort/core/dtype.h"
#include "cohort/core/native/bf16_panels.h"
#include "cohort/core/native/gemm_blocked.h"

// GCC 12 warns of the undefined source vector inside its own AVX-512
// intrinsics (as cohort/base/isa.h notes for every ISA copy).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// In a namespace under isa_avx512 (not an ISA copy: one compilation, with
// AVX512-BF16 on top), so that tests/portability's check finds its AVX-512
// code where AVX-512 belongs.
namespace cohort::native::isa_avx512::bf16 {
namespace {

#define COHORT_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

// The mask of lanes 0..n-1 of 16.
inline __mmask16 first_lanes(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max(n, 0)) - 1);
}

inline uint32_t pair_word(uint16_t lo, uint16_t hi) { return lo | (uint32_t(hi) << 16); }

// r[j] = column j of the 16 x 16 block of 32-bit words whose rows are r[0..15].
COHORT_BF16_TARGET
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // In each 128-bit lane L, r[4i + c] then holds rows 4i..4i+3 of column 4L + c.
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i even01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
    const __m512i even23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    const __m512i odd01 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD);
    const __m512i odd23 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
    t[c] = _mm512_shuffle_i32x4(even01, even23, 0x88);
    t[8 + c] = _mm512_shuffle_i32x4(even01, even23, 0xDD);
    t[4 + c] = _mm512_shuffle_i32x4(odd01, odd23, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(odd01, odd23, 0xDD);
  }
  for (int j = 0; j < 16; ++j) r[j] = t[j];
}

}  // namespace

// Panel words dst[q * width + r], r < width, from `rows` source rows whose
// pairs are contiguous (row r's word q at src + r * ld + 2q), zero for rows
// past `rows` and for the element past an odd kc: 16 words of 16 rows at a
// time through an in-register transpose.
COHORT_BF16_TARGET
void pack_along_k(const uint16_t* src, int64_t ld, int rows, int64_t kc, int width, uint32_t* dst) {
  const int64_t full = kc / 2;  // pairs wholly inside kc
  for (int g = 0; g < width; g += 16) {
    const int lanes = std::min(16, width - g);
    const int valid = std::max(0, std::min(lanes, rows - g));
    const __mmask16 store = first_lanes(lanes);
    const uint16_t* base = src + g * ld;
    for (int64_t q0 = 0; q0 < full; q0 += 16) {
      const int words = static_cast<int>(std::min<int64_t>(16, full - q0));
      const __mmask16 load = first_lanes(words);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        // The next panel's rows at the same k: each row gives a panel only
        // kc / 32 lines, too short a stream for the hardware prefetcher, and
        // these loads stalled on memory (perf: a third of the step's
        // packing; 6.6 % -> 2.7 % of a bf16 GPT step on one Zen 5 core).
        // A prefetch past the matrix's end does not fault (the address is
        // formed as an integer: no out-of-range pointer arithmetic).
        if (i < lanes)
          _mm_prefetch(reinterpret_cast<const char*>(
                           reinterpret_cast<uintptr_t>(base) +
                           sizeof(uint16_t) * static_cast<uintptr_t>((i + width) * ld + 2 * q0)),
                       _MM_HINT_T0);
        r[i] = i < valid ? _mm512_maskz_loadu_epi32(load, base + i * ld + 2 * q0)
                         : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int t = 0; t < words; ++t)
        _mm512_mask_storeu_epi32(dst + (q0 + t) * width + g, store, r[t]);
    }
    if (kc % 2)
      for (int r = 0; r < lanes; ++r)
        dst[full * width + g + r] = r < valid ? pair_word(base[r * ld + 2 * full], 0) : 0u;
  }
}

// Panel words dst[q * width + j], j < width (at most 32), from row pairs:
// word (q, j) is (src[2q * ld + j], src[(2q + 1) * ld + j]), zero past `cols`
// and past kc. The two rows' 16-bit elements interleaved within 128-bit lanes
// (unpack), then the lanes put in column order.
COHORT_BF16_TARGET
void pack_across_k(const uint16_t* src, int64_t ld, int cols, int64_t kc, int width,
                   uint32_t* dst) {
  const __mmask32 load = cols >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << cols) - 1);
  const __mmask16 store0 = first_lanes(width), store1 = first_lanes(width - 16);
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int64_t q = 0; 2 * q < kc; ++q) {
    const uint16_t* r0 = src + 2 * q * ld;
    const __m512i a = _mm512_maskz_loadu_epi16(load, r0);
    const __m512i b =
        2 * q + 1 < kc ? _mm512_maskz_loadu_epi16(load, r0 + ld) : _mm512_setzero_si512();
    const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
    _mm512_mask_storeu_epi32(dst + q * width, store0, _mm512_permutex2var_epi64(lo, first, hi));
    if (width > 16)
      _mm512_mask_storeu_epi32(dst + q * width + 16, store1,
                               _mm512_permutex2var_epi64(lo, second, hi));
  }
}

namespace {

using detail::blocked_gemm;

constexpr int kMR = 12, kNV = 2, kNR = kNV * 16;

COHORT_BF16_TARGET
void micro(int64_t kc, const uint16_t* __restrict ap, const uint16_t* __restrict bp, float* c,
           int64_t ldc, int m, int n, float alpha, float beta, bool first, const float* bias) {
  if (!first || beta != 0.0f)
    for (int i = 0; i < m; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNR - 1), _MM_HINT_T0);
    }
  __m512 acc[kMR][kNV];
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_setzero_ps();
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh b[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(bp + v * 32);
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      int32_t word;
      std::memcpy(&word, ap + 2 * i, sizeof word);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(word);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], a, b[v]);
    }
    ap += 2 * kMR;
    bp += 2 * kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __m512 vbias[kNV];
  for (int v = 0; v < kNV; ++v)
    vbias[v] = first && bias ? _mm512_maskz_loadu_ps(first_lanes(n - v * 16), bias + v * 16)
                             : _mm512_setzero_ps();
  if (m == kMR && n == kNR) {
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        float* p = c + i * ldc + v * 16;
        __m512 r = _mm512_fmadd_ps(acc[i][v], va, vbias[v]);
        if (!first)
          r = _mm512_add_ps(r, _mm512_loadu_ps(p));
        else if (beta != 0.0f)
          r = _mm512_fmadd_ps(_mm512_loadu_ps(p), vb, r);
        _mm512_storeu_ps(p, r);
      }
    return;
  }
  // A corner tile: the same arithmetic under lane masks (n columns of m rows).
  for (int i = 0; i < m; ++i)
    for (int v = 0; v < kNV; ++v) {
      const int cols = n - v * 16;
      if (cols <= 0) break;
      const __mmask16 mask = first_lanes(cols);
      float* p = c + i * ldc + v * 16;
      __m512 r = _mm512_fmadd_ps(acc[i][v], va, vbias[v]);
      if (!first)
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, p));
      else if (beta != 0.0f)
        r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, p), vb, r);
      _mm512_mask_storeu_ps(p, mask, r);
    }
}

// Panels of `width` rows of op(A) (columns of op(B)) from index i0, n of
// them, k from p0: `along_k` when the matrix runs along k in memory (A as
// stored, B transposed), else across it.
void pack_panels(bool along_k, const uint16_t* m, int64_t ld, int64_t i0, int64_t n, int64_t p0,
                 int64_t kc, int width, uint16_t* out) {
  const int64_t kcp = (kc + 1) / 2 * 2;
  for (int64_t o = 0; o < n; o += width) {
    const int count = static_cast<int>(std::min<int64_t>(width, n - o));
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + o * kcp);
    if (along_k)
      pack_along_k(m + (i0 + o) * ld + p0, ld, count, kc, width, dst);
    else
      pack_across_k(m + p0 * ld + i0 + o, ld, count, kc, width, dst);
  }
}

void pack_a(bool ta, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
            uint16_t* ap) {
  // op(A)(i, p) = ta ? a[p lda + i] : a[i lda + p]
  pack_panels(!ta, a, lda, i0, mc, p0, kc, kMR, ap);
}

void pack_b(bool tb, const uint16_t* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
            uint16_t* bp) {
  // op(B)(p, j) = tb ? b[j ldb + p] : b[p ldb + j]
  pack_panels(tb, b, ldb, j0, nc, p0, kc, kNR, bp);
}

struct Bf16GemmKernels {
  int mr, nr, kpack;
  void (*micro)(int64_t, const uint16_t*, const uint16_t*, float*, int64_t, int, int, float, float,
                bool, const float*);
  void (*pack_a)(bool, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t, uint16_t*);
  void (*pack_b)(bool, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t, uint16_t*);
};

constexpr Bf16GemmKernels kKernels{kMR, kNR, 2, &micro, &pack_a, &pack_b};

}  // namespace

namespace {

// BFloat16's own conversion of x[i, min(i + 16, n)).
void to_bf16_scalar(const float* x, BFloat16* y, int64_t i, int64_t n) {
  for (int64_t j = i; j < std::min<int64_t>(n, i + 16); ++j) y[j] = BFloat16(x[j]);
}

}  // namespace

COHORT_BF16_TARGET
void avx512bf16_to_bf16(const float* x, BFloat16* y, int64_t n) {
  // vcvtneps2bf16 rounds to nearest even like BFloat16, but flushes
  // subnormal inputs to zero and keeps a NaN's payload (BFloat16 gives
  // 0x7fc0): 16-lane groups with such a value (classes QNaN 0x01, SNaN 0x80,
  // denormal 0x20) take BFloat16's own conversion. 64 floats per step, one
  // test for all four groups: 1.3x the rate of 16 at a time on rows in L1.
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
    const __m512 v2 = _mm512_loadu_ps(x + i + 32), v3 = _mm512_loadu_ps(x + i + 48);
    _mm512_storeu_si512(y + i, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
    _mm512_storeu_si512(y + i + 32, (__m512i)_mm512_cvtne2ps_pbh(v3, v2));
    if (_mm512_fpclass_ps_mask(v0, 0xA1) | _mm512_fpclass_ps_mask(v1, 0xA1) |
        _mm512_fpclass_ps_mask(v2, 0xA1) | _mm512_fpclass_ps_mask(v3, 0xA1))
      for (int64_t g = i; g < i + 64; g += 16) to_bf16_scalar(x, y, g, n);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = first_lanes(static_cast<int>(std::min<int64_t>(n - i, 16)));
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (_mm512_mask_fpclass_ps_mask(m, v, 0xA1)) {
      to_bf16_scalar(x, y, i, n);
      continue;
    }
    _mm256_mask_storeu_epi16(y + i, m, (__m256i)_mm512_cvtneps_pbh(v));
  }
}

void avx512bf16_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                          float beta, float* c, int64_t ldc, const float* bias,
                          const detail::BlockDone* done) {
  if (m == 0 || n == 0) return;
  static_assert(sizeof(BFloat16) == sizeof(uint16_t));
  blocked_gemm(kKernels, ta, tb, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda,
               reinterpret_cast<const uint16_t*>(b), ldb, beta, c, ldc, bias, done);
}

}  // namespace cohort::native::isa_avx512::bf16

#endif  // __x86_64__
