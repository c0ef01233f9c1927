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

struct GemmKernels {
  int mr;  // rows of the register tile
  int nr;  // columns of the register tile (a multiple of the vector width)
  void (*micro)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int m, int n,
                float alpha, float beta, bool first);
};

// The copy of the kernel path in use; null on the baseline path.
const GemmKernels* gemm_kernels();

}  // namespace cohort::native
