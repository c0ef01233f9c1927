// native::gemm_packed: cohort's own packed fp32 GEMM, gemm_blocked.h's loop
// nest around gemm_kernels.h's microkernel.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/gemm_blocked.h"
#include "cohort/core/native/gemm_kernels.h"
#include "cohort/core/native/linalg.h"

namespace cohort::native {

COHORT_ISA_DECLARE_TABLE(GemmKernels, kGemmKernels)

const GemmKernels* gemm_kernels() {
  return COHORT_ISA_TABLE(GemmKernels, static_cast<const GemmKernels*>(nullptr), kGemmKernels);
}

bool gemm_packed_available() { return gemm_kernels() != nullptr; }

void gemm_packed(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const GemmKernels* kr = gemm_kernels();
  COHORT_CHECK(kr != nullptr,
               "gemm_packed: no packed GEMM on the {} kernel path (it needs avx2 or avx512)",
               kernel_path_name(kernel_path()));
  if (m == 0 || n == 0) return;
  detail::blocked_gemm(*kr, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace cohort::native
