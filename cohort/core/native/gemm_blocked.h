// Internal to native: the Goto / BLIS loop nest shared by cohort's packed
// GEMMs (gemm_packed.cc for float32, gemm_bf16_avx512.cc for bfloat16 inputs
// with float32 accumulation). Blocks: kKC steps of k per pass, 16 register
// tiles of A rows packed per block (kept in L2), kNC columns of B packed per
// block (L3). Threads split C into row or column ranges that are whole
// register tiles; every thread packs its own operands. Each element of C is
// the same sum in the same order whatever the split, so the result has the
// same bits on any number of threads.
//
// Kernels (gemm_kernels.h's GemmKernels, or gemm_bf16_kernels.h's) provide
// mr, nr, kpack (the multiple of k a packed panel's depth is rounded up to: 1
// for float32, 2 for bf16 pairs), micro, pack_a, pack_b over elements of type
// T; packing may write up to kPackSlack elements past the last panel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/native/gemm_kernels.h"

namespace cohort::native::detail {

inline constexpr int64_t kBlockKC = 256, kBlockNC = 3072;

// done(r0, r1, c0, c1), when given, runs on the thread that computed it for
// each block of C (rows [r0, r1) x columns [c0, c1)) right after the block's
// last pass over k, while the block is still in that core's cache: a fused
// elementwise epilogue without another pass over C. Blocks are disjoint.
using BlockDone = std::function<void(int64_t, int64_t, int64_t, int64_t)>;

// One thread's part: C rows [r0, r1) x columns [c0, c1).
// `bias` (kernels whose micro takes one: the bf16 ones), when not null, is a
// row added to every row of C on the first pass over k: C = alpha op(A)
// op(B) + bias + beta C without a separate pass over C.
template <typename Kernels, typename T>
void blocked_gemm_range(const Kernels& kr, bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0,
                        int64_t c1, int64_t k, float alpha, const T* a, int64_t lda, const T* b,
                        int64_t ldb, float beta, float* c, int64_t ldc, const float* bias = nullptr,
                        const BlockDone* done = nullptr) {
  const int mr = kr.mr, nr = kr.nr;
  const int64_t mc_max = 16 * mr;
  const int64_t kc_max = (std::min(kBlockKC, k) + kr.kpack - 1) / kr.kpack * kr.kpack;
  thread_local std::vector<T> abuf, bbuf;
  const int64_t nc_max = std::min<int64_t>(kBlockNC, (c1 - c0 + nr - 1) / nr * nr);
  abuf.resize(static_cast<size_t>(mc_max * kc_max + kPackSlack));
  bbuf.resize(static_cast<size_t>(nc_max * kc_max + kPackSlack));
  for (int64_t jc = c0; jc < c1; jc += kBlockNC) {
    const int64_t nc = std::min(kBlockNC, c1 - jc);
    for (int64_t pc = 0; pc < k; pc += kBlockKC) {
      const int64_t kc = std::min(kBlockKC, k - pc);
      const int64_t kcp = (kc + kr.kpack - 1) / kr.kpack * kr.kpack;  // panel depth
      const bool first = pc == 0, last = pc + kc >= k;
      kr.pack_b(tb, b, ldb, pc, kc, jc, nc, bbuf.data());
      for (int64_t ic = r0; ic < r1; ic += mc_max) {
        const int64_t mc = std::min(mc_max, r1 - ic);
        kr.pack_a(ta, a, lda, ic, mc, pc, kc, abuf.data());
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const int n = static_cast<int>(std::min<int64_t>(nr, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int m = static_cast<int>(std::min<int64_t>(mr, mc - ir));
            float* ct = c + (ic + ir) * ldc + jc + jr;
            if constexpr (requires {
                            kr.micro(kc, abuf.data(), bbuf.data(), ct, ldc, m, n, alpha, beta,
                                     first, bias);
                          })
              kr.micro(kc, abuf.data() + ir * kcp, bbuf.data() + jr * kcp, ct, ldc, m, n, alpha,
                       beta, first, bias ? bias + jc + jr : nullptr);
            else
              kr.micro(kc, abuf.data() + ir * kcp, bbuf.data() + jr * kcp, ct, ldc, m, n, alpha,
                       beta, first);
          }
        }
        if (last && done && *done) (*done)(ic, ic + mc, jc, jc + nc);
      }
    }
  }
}

// C[m, n] = alpha op(A) op(B) + beta C, split over cohort::num_threads() along
// C's longer side (one thread below 2^18 multiply-adds). m, n > 0; k == 0
// scales C by beta (beta == 0 writes zeros).
template <typename Kernels, typename T>
void blocked_gemm(const Kernels& kr, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, float beta, float* c,
                  int64_t ldc, const float* bias = nullptr, const BlockDone* done = nullptr) {
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]) + (bias ? bias[j] : 0.0f);
    if (done && *done) (*done)(0, m, 0, n);
    return;
  }
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? kr.mr : kr.nr;
  const int64_t units = ((by_rows ? m : n) + unit - 1) / unit;
  const int64_t parts = std::min<int64_t>(num_threads(), units);
  if (parts <= 1 || m * n * k < (int64_t(1) << 18)) {
    blocked_gemm_range(kr, ta, tb, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, done);
    return;
  }
  const int64_t len = by_rows ? m : n;
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t s = std::min(len, units * p / parts * unit);
      const int64_t e = std::min(len, units * (p + 1) / parts * unit);
      if (e <= s) continue;
      if (by_rows)
        blocked_gemm_range(kr, ta, tb, s, e, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias,
                           done);
      else
        blocked_gemm_range(kr, ta, tb, 0, m, s, e, k, alpha, a, lda, b, ldb, beta, c, ldc, bias,
                           done);
    }
  });
}

}  // namespace cohort::native::detail
