// Internal to native::gemm: the register-tile microkernel of cohort's own
// packed fp32 GEMM (gemm_packed.cc), one copy per fast kernel path
// (gemm_kernels_isa.cc; null on the baseline path, which has no packed GEMM).
//
// Operands come packed: A in panels of mr rows (ap[p * mr + i] for p < kc,
// zero rows past the matrix), B in panels of nr columns (bp[p * nr + j]). The
// kernel forms acc[i][j] = sum over p = 0, 1, ..., kc - 1 of ap * bp (one FMA
// per p, in that order: the bits depend only on kc, never on the tile's place
// or the thread), then writes the m x n corner (m <= mr, n <= nr) of
// C = alpha * acc + (first ? beta * C : C), where beta == 0 never reads C.
// Pure function of its inputs; thread safe.
#pragma once

#include <cstdint>

namespace cohort::native {

// Floats a packing may write past its panels (see pack_a / pack_b).
inline constexpr int64_t kPackSlack = 32;

struct GemmKernels {
  int mr;  // rows of the register tile
  int nr;  // columns of the register tile (a multiple of the vector width)
  void (*micro)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int m, int n,
                float alpha, float beta, bool first);
  // ap: mc rows of op(A) from (i0, p0), kc deep, in panels of mr rows (zero
  // rows past mc); bp: nc columns of op(B) from (p0, j0) in panels of nr
  // columns (zero columns past nc). Both may write up to kPackSlack floats
  // past the last panel.
  void (*pack_a)(bool trans_a, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                 int64_t kc, float* ap);
  void (*pack_b)(bool trans_b, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                 int64_t nc, float* bp);
  int kpack = 1;  // panel depth multiple (gemm_blocked.h)
};

// The copy of the kernel path in use; null on the baseline path.
const GemmKernels* gemm_kernels();

}  // namespace cohort::native
