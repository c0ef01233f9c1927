// native::gemm_packed: cohort's own packed fp32 GEMM (the Goto / BLIS loop
// nest around gemm_kernels.h's microkernel). Blocks: KC columns of A / rows of
// B per pass, MC rows of A packed per block (kept in L2), NC columns of B
// packed per block (L3). Threads split C into row or column ranges that are
// whole register tiles; every thread packs its own operands. Each element of C
// is the same sum in the same order whatever the split, so the result has the
// same bits on any number of threads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/gemm_kernels.h"
#include "cohort/core/native/linalg.h"

namespace cohort::native {

COHORT_ISA_DECLARE_TABLE(GemmKernels, kGemmKernels)

const GemmKernels* gemm_kernels() {
  return COHORT_ISA_TABLE(GemmKernels, static_cast<const GemmKernels*>(nullptr), kGemmKernels);
}

namespace {

constexpr int64_t kKC = 256, kNC = 3072;

// One thread's part: C rows [r0, r1) x columns [c0, c1).
void packed_range(const GemmKernels& kr, bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0,
                  int64_t c1, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float beta, float* c, int64_t ldc) {
  const int mr = kr.mr, nr = kr.nr;
  const int64_t mc_max = 16 * mr;
  thread_local std::vector<float> abuf, bbuf;
  const int64_t nc_max = std::min<int64_t>(kNC, (c1 - c0 + nr - 1) / nr * nr);
  abuf.resize(static_cast<size_t>(mc_max * kKC + kPackSlack));
  bbuf.resize(static_cast<size_t>(nc_max * std::min(kKC, k) + kPackSlack));
  for (int64_t jc = c0; jc < c1; jc += kNC) {
    const int64_t nc = std::min(kNC, c1 - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc);
      const bool first = pc == 0;
      kr.pack_b(tb, b, ldb, pc, kc, jc, nc, bbuf.data());
      for (int64_t ic = r0; ic < r1; ic += mc_max) {
        const int64_t mc = std::min(mc_max, r1 - ic);
        kr.pack_a(ta, a, lda, ic, mc, pc, kc, abuf.data());
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const int n = static_cast<int>(std::min<int64_t>(nr, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int m = static_cast<int>(std::min<int64_t>(mr, mc - ir));
            kr.micro(kc, abuf.data() + ir * kc, bbuf.data() + jr * kc,
                     c + (ic + ir) * ldc + jc + jr, ldc, m, n, alpha, beta, first);
          }
        }
      }
    }
  }
}

}  // namespace

bool gemm_packed_available() { return gemm_kernels() != nullptr; }

void gemm_packed(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const GemmKernels* kr = gemm_kernels();
  COHORT_CHECK(kr != nullptr,
               "gemm_packed: no packed GEMM on the {} kernel path (it needs avx2 or avx512)",
               kernel_path_name(kernel_path()));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // Split the longer side of C in whole register tiles, one range per thread.
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? kr->mr : kr->nr;
  const int64_t units = ((by_rows ? m : n) + unit - 1) / unit;
  const int64_t parts = std::min<int64_t>(num_threads(), units);
  if (parts <= 1 || m * n * k < (int64_t(1) << 18)) {
    packed_range(*kr, ta, tb, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t len = by_rows ? m : n;
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t s = std::min(len, units * p / parts * unit);
      const int64_t e = std::min(len, units * (p + 1) / parts * unit);
      if (e <= s) continue;
      if (by_rows)
        packed_range(*kr, ta, tb, s, e, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      else
        packed_range(*kr, ta, tb, 0, m, s, e, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
  });
}

}  // namespace cohort::native
