// Internal to the attention kernels: the block operations the blocked
// algorithm (attention.cc) is written in, one copy per ISA
// (attention_isa.cc) and a plain baseline (attention.cc); attention_ops()
// gives the copy of the current kernel path (cohort/base/cpu.h).
//
// Scores are handled in base 2: x = s * c with c = scale * log2(e), so that
// exp(s * scale - m) = exp2(x - m / ln 2). Score tiles have kAttentionBlock
// columns (ld = kAttentionBlock); packed key tiles are [head_dim, ld] with
// the columns past the block's keys zero, so vector code may run past `cols`
// up to a multiple of 16 without reading garbage.
#pragma once

#include <cstdint>

namespace cohort::kernels::detail {

constexpr int64_t kUnbounded = int64_t{1} << 40;

// The part of a tile a causal mask leaves: row r needs the inner indices k in
// [r + lo, r + 1 + hi) (clipped to the tile). Work outside may be skipped, in
// groups of rows and vectors; the default is the whole tile.
struct Band {
  int64_t lo = -kUnbounded, hi = kUnbounded;
};

struct AttentionOps {
  // c[r * ldc + j] = sum_d a[r * lda + d] * bt[d * ldb + j] for r < rows and
  // j < cols, at least for j < r + 1 + band.hi (band.lo is not used); other
  // columns of c, up to the next multiple of 16 <= ldc, may hold anything.
  void (*gemm_nt)(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t lda,
                  const float* bt, int64_t ldb, float* c, int64_t ldc, Band band);
  // c[r * ldc + x] += sum_k a[r * a_rs + k * a_ks] * b[k * ldb + x] for
  // r < rows, x < n: accumulates in k order, k = 0 first. Terms outside the
  // band may be left out: a must be zero there.
  void (*gemm_acc)(int64_t rows, int64_t n, int64_t depth, const float* a, int64_t a_rs,
                   int64_t a_ks, const float* b, int64_t ldb, float* c, int64_t ldc, Band band);
  // max over j < n (n >= 1) of s[j] * c.
  float (*row_max)(const float* s, int64_t n, float c);
  // p[j] = exp2(s[j] * c - m) for j < n and 0 for n <= j < n_zero (p may be
  // s); returns the sum of p[0..n).
  float (*row_exp)(const float* s, int64_t n, int64_t n_zero, float c, float m, float* p);
  // ds[j] = p[j] * (dp[j] - delta) * scale for j < n and 0 for n <= j <
  // n_zero (dp there is not read; ds may be dp).
  void (*row_ds)(const float* p, const float* dp, int64_t n, int64_t n_zero, float delta,
                 float scale, float* ds);
  // y[j] = x[j] * a for j < n (y may be x).
  void (*scale_row)(const float* x, int64_t n, float a, float* y);
  // dst[c * ldd + j] = src[j * rs + c] for c < d, j < rows, and 0 for
  // rows <= j < ldd (ldd a multiple of 16).
  void (*pack_t)(const float* src, int64_t rs, int64_t rows, int64_t d, float* dst, int64_t ldd);
};

const AttentionOps* attention_ops();
extern const AttentionOps kAttentionOpsBaseline;

}  // namespace cohort::kernels::detail
