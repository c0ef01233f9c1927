// The attention block operations (attention_blocks.h), one copy per ISA.
//
// gemm_nt (scores = q kt, dP = dout vt) keeps a register tile of kNtR rows
// x kNtCV vectors of keys and walks head_dim: per step kNtCV loads of the
// packed keys and kNtR broadcasts of q. gemm_acc (out += P v, dv += P^T
// dout, dk += dS^T q, dq += dS k) keeps kAccR rows x kAccCV vectors of
// head_dim in registers and walks the inner dimension; a head_dim that is not
// a multiple of the vector ends in a masked vector. exp is a base-2
// polynomial: exp2(x) = 2^n p(f), n = round(x), f = x - n in [-0.5, 0.5], p the
// degree-7 Taylor polynomial of 2^f (truncation error < 6e-9 relative, below
// float's rounding); x below -127 gives exactly 0 and NaN stays NaN.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cohort/base/isa.h"
#include "cohort/core/kernels/attention_blocks.h"

COHORT_ISA_BEGIN
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused
// merge source of max/shuffle/permute, which -Wuninitialized reports.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

#if defined(COHORT_ISA_AVX512)
constexpr int kNtR = 6, kNtCV = 4;    // 24 accumulators of 32 registers
constexpr int kAccR = 6, kAccCV = 4;  // 24 accumulators
inline void vstoreu(float* p, VN v) { _mm512_storeu_ps(p, v); }
inline VN vmin(VN a, VN b) { return _mm512_min_ps(a, b); }
inline VN vround(VN x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline VN vpow2i(VN n) {  // 2^n for integral n in [-127, 127] (2^-127 reads as 0)
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
// Lanes k.. replaced by `fill`.
inline VN vkeep_first(VN v, int64_t k, float fill) {
  return _mm512_mask_blend_ps(first_k(k), _mm512_set1_ps(fill), v);
}
inline float vhmax(VN v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4e));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0xb1));
  return _mm512_cvtss_f32(v);
}
#elif defined(COHORT_ISA_AVX2)
constexpr int kNtR = 6, kNtCV = 2;    // 12 accumulators of 16 registers
constexpr int kAccR = 6, kAccCV = 2;  // 12 accumulators
inline void vstoreu(float* p, VN v) { _mm256_storeu_ps(p, v); }
inline VN vmin(VN a, VN b) { return _mm256_min_ps(a, b); }
inline VN vround(VN x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline VN vpow2i(VN n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
inline VN vkeep_first(VN v, int64_t k, float fill) {
  return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(first_k(k)));
}
inline float vhmax(VN v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

inline VN vexp2(VN x) {
  // max/min return their second operand when either is NaN: keep x second.
  x = vmin(vset1(127.0f), vmax(vset1(-127.0f), x));
  const VN n = vround(x);
  const VN f = vsub(x, n);
  VN p = vset1(1.5252733804059838e-05f);
  p = vfmadd(p, f, vset1(1.5403530393381606e-04f));
  p = vfmadd(p, f, vset1(1.3333558146428441e-03f));
  p = vfmadd(p, f, vset1(9.618129107628477e-03f));
  p = vfmadd(p, f, vset1(5.5504108664821576e-02f));
  p = vfmadd(p, f, vset1(0.2402265069591007f));
  p = vfmadd(p, f, vset1(0.6931471805599453f));
  p = vfmadd(p, f, vset1(1.0f));
  return vmul(p, vpow2i(n));
}

// ---- gemm_nt: c = a bt over register tiles of R rows x CV vectors ----

template <int R, int CV>
void nt_tile(int64_t depth, const float* a, int64_t lda, const float* bt, int64_t ldb, float* c,
             int64_t ldc) {
  VN acc[R][CV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < CV; ++v) acc[r][v] = vzero();
  for (int64_t d = 0; d < depth; ++d) {
    VN b[CV];
#pragma GCC unroll 4
    for (int v = 0; v < CV; ++v) b[v] = vloadu(bt + d * ldb + v * kN);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const VN x = vset1(a[r * lda + d]);
#pragma GCC unroll 4
      for (int v = 0; v < CV; ++v) acc[r][v] = vfmadd(x, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < CV; ++v) vstoreu(c + r * ldc + v * kN, acc[r][v]);
}

template <int R, int CV>
void nt_pick_cv(int cv, int64_t depth, const float* a, int64_t lda, const float* bt, int64_t ldb,
                float* c, int64_t ldc) {
  if constexpr (CV == 1) {
    nt_tile<R, 1>(depth, a, lda, bt, ldb, c, ldc);
  } else {
    if (cv == CV) return nt_tile<R, CV>(depth, a, lda, bt, ldb, c, ldc);
    nt_pick_cv<R, CV - 1>(cv, depth, a, lda, bt, ldb, c, ldc);
  }
}

template <int R>
void nt_pick(int r, int cv, int64_t depth, const float* a, int64_t lda, const float* bt,
             int64_t ldb, float* c, int64_t ldc) {
  if constexpr (R == 1) {
    nt_pick_cv<1, kNtCV>(cv, depth, a, lda, bt, ldb, c, ldc);
  } else {
    if (r == R) return nt_pick_cv<R, kNtCV>(cv, depth, a, lda, bt, ldb, c, ldc);
    nt_pick<R - 1>(r, cv, depth, a, lda, bt, ldb, c, ldc);
  }
}

void gemm_nt(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t lda,
             const float* bt, int64_t ldb, float* c, int64_t ldc, Band band) {
  for (int64_t r = 0; r < rows; r += kNtR) {
    const int rr = static_cast<int>(std::min<int64_t>(kNtR, rows - r));
    const int64_t end = std::min(cols, r + rr + band.hi);  // the group's last row's columns
    const int64_t nv = (end + kN - 1) / kN;
    for (int64_t v = 0; v < nv; v += kNtCV) {
      const int cv = static_cast<int>(std::min<int64_t>(kNtCV, nv - v));
      nt_pick<kNtR>(rr, cv, depth, a + r * lda, lda, bt + v * kN, ldb, c + r * ldc + v * kN, ldc);
    }
  }
}

// ---- gemm_acc: c += a b over register tiles of R rows x CV vectors ----
// The last of the CV vectors holds `tail` (1..kN) floats when Masked.

template <int R, int CV, bool Masked>
void acc_tile(int64_t depth, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
              int64_t ldb, float* c, int64_t ldc, int64_t tail) {
  constexpr int L = CV - 1;
  VN acc[R][CV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < L; ++v) acc[r][v] = vloadu(c + r * ldc + v * kN);
    acc[r][L] = Masked ? vload_first(c + r * ldc + L * kN, tail) : vloadu(c + r * ldc + L * kN);
  }
  for (int64_t k = 0; k < depth; ++k) {
    VN bv[CV];
    const float* bk = b + k * ldb;
#pragma GCC unroll 4
    for (int v = 0; v < L; ++v) bv[v] = vloadu(bk + v * kN);
    bv[L] = Masked ? vload_first(bk + L * kN, tail) : vloadu(bk + L * kN);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const VN x = vset1(a[r * a_rs + k * a_ks]);
#pragma GCC unroll 4
      for (int v = 0; v < CV; ++v) acc[r][v] = vfmadd(x, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < L; ++v) vstoreu(c + r * ldc + v * kN, acc[r][v]);
    if (Masked)
      vstore_first(c + r * ldc + L * kN, tail, acc[r][L]);
    else
      vstoreu(c + r * ldc + L * kN, acc[r][L]);
  }
}

struct AccArgs {
  int64_t depth;
  const float* a;
  int64_t a_rs, a_ks;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc, tail;
};

template <int R, int CV>
void acc_run(const AccArgs& x) {
  if (x.tail == kN)
    acc_tile<R, CV, false>(x.depth, x.a, x.a_rs, x.a_ks, x.b, x.ldb, x.c, x.ldc, x.tail);
  else
    acc_tile<R, CV, true>(x.depth, x.a, x.a_rs, x.a_ks, x.b, x.ldb, x.c, x.ldc, x.tail);
}

template <int R, int CV>
void acc_pick_cv(int cv, const AccArgs& x) {
  if constexpr (CV == 1) {
    acc_run<R, 1>(x);
  } else {
    if (cv == CV) return acc_run<R, CV>(x);
    acc_pick_cv<R, CV - 1>(cv, x);
  }
}

template <int R>
void acc_pick(int r, int cv, const AccArgs& x) {
  if constexpr (R == 1) {
    acc_pick_cv<1, kAccCV>(cv, x);
  } else {
    if (r == R) return acc_pick_cv<R, kAccCV>(cv, x);
    acc_pick<R - 1>(r, cv, x);
  }
}

void gemm_acc(int64_t rows, int64_t n, int64_t depth, const float* a, int64_t a_rs, int64_t a_ks,
              const float* b, int64_t ldb, float* c, int64_t ldc, Band band) {
  const int64_t nv = (n + kN - 1) / kN;
  for (int64_t r = 0; r < rows; r += kAccR) {
    const int rr = static_cast<int>(std::min<int64_t>(kAccR, rows - r));
    // The group's first row starts the band, its last row ends it.
    const int64_t k0 = std::max<int64_t>(0, r + band.lo);
    const int64_t k1 = std::min(depth, r + rr + band.hi);
    if (k1 <= k0) continue;
    for (int64_t v = 0; v < nv; v += kAccCV) {
      const int cv = static_cast<int>(std::min<int64_t>(kAccCV, nv - v));
      const int64_t tail = std::min<int64_t>(kN, n - (v + cv - 1) * kN);
      acc_pick<kAccR>(rr, cv,
                      AccArgs{k1 - k0, a + r * a_rs + k0 * a_ks, a_rs, a_ks, b + k0 * ldb + v * kN,
                              ldb, c + r * ldc + v * kN, ldc, tail});
    }
  }
}

// ---- rows of a score tile ----

float row_max(const float* s, int64_t n, float c) {
  const float inf = std::numeric_limits<float>::infinity();
  const VN vc = vset1(c);
  VN m = vset1(-inf);
  int64_t j = 0;
  for (; j + kN <= n; j += kN) m = vmax(m, vmul(vloadu(s + j), vc));
  if (j < n) m = vmax(m, vkeep_first(vmul(vload_first(s + j, n - j), vc), n - j, -inf));
  return vhmax(m);
}

float row_exp(const float* s, int64_t n, int64_t n_zero, float c, float m, float* p) {
  const VN vc = vset1(c), vm = vset1(m);
  VN sum = vzero();
  int64_t j = 0;
  for (; j + kN <= n; j += kN) {
    const VN e = vexp2(vfmsub(vloadu(s + j), vc, vm));
    vstoreu(p + j, e);
    sum = vadd(sum, e);
  }
  if (j < n) {
    const VN e = vkeep_first(vexp2(vfmsub(vload_first(s + j, n - j), vc, vm)), n - j, 0.0f);
    vstore_first(p + j, std::min<int64_t>(kN, n_zero - j), e);
    sum = vadd(sum, e);
    j += kN;
  }
  for (; j < n_zero; j += kN) vstore_first(p + j, std::min<int64_t>(kN, n_zero - j), vzero());
  return vsum(sum);
}

void row_ds(const float* p, const float* dp, int64_t n, int64_t n_zero, float delta, float scale,
            float* ds) {
  const VN vd = vset1(delta), vs = vset1(scale);
  int64_t j = 0;
  for (; j < n; j += kN) {
    const int64_t k = std::min<int64_t>(kN, n - j);
    const VN r = vmul(vmul(vload_first(p + j, k), vsub(vload_first(dp + j, k), vd)), vs);
    vstore_first(ds + j, std::min<int64_t>(kN, n_zero - j), vkeep_first(r, k, 0.0f));
  }
  for (; j < n_zero; j += kN) vstore_first(ds + j, std::min<int64_t>(kN, n_zero - j), vzero());
}

void scale_row(const float* x, int64_t n, float a, float* y) {
  const VN va = vset1(a);
  int64_t j = 0;
  for (; j + kN <= n; j += kN) vstoreu(y + j, vmul(vloadu(x + j), va));
  if (j < n) vstore_first(y + j, n - j, vmul(vload_first(x + j, n - j), va));
}

// kN x kN blocks through vtranspose; rows past `rows` read as zero.
void pack_t(const float* src, int64_t rs, int64_t rows, int64_t d, float* dst, int64_t ldd) {
  for (int64_t j = 0; j < ldd; j += kN)
    for (int64_t c = 0; c < d; c += kN) {
      const int64_t w = std::min<int64_t>(kN, d - c);
      VN r[kN];
#pragma GCC unroll 16
      for (int i = 0; i < kN; ++i)
        r[i] = j + i < rows ? vload_first(src + (j + i) * rs + c, w) : vzero();
      vtranspose(r);
      for (int64_t i = 0; i < w; ++i) vstoreu(dst + (c + i) * ldd + j, r[i]);
    }
}

}  // namespace

extern const AttentionOps kAttentionOps;
const AttentionOps kAttentionOps{gemm_nt, gemm_acc, row_max, row_exp, row_ds, scale_row, pack_t};

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
