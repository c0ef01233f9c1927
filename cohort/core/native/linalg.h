// Matrix products through OpenBLAS (not recorded by autograd).
// BLAS threading: OpenBLAS's own threads are switched off once (process-wide,
// first use) and big products are split over cohort::parallel_for instead, so
// each call is bounded by the calling thread's budget and concurrent calls
// from several threads (DataParallel replicas) neither oversubscribe nor
// share state. float32 uses sgemm, float64 dgemm.
#pragma once

#include "cohort/core/tensor.h"

namespace cohort::native {

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when the
// flag is set (lda/ldb/ldc are row strides as in cblas RowMajor).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

// [M,K] x [K,N] -> [M,N]. Transposed views are passed to BLAS without a copy.
Tensor mm(const Tensor& a, const Tensor& b);
// torch.matmul: 1-D/2-D/batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// y[..., out] = x[..., in] w[out, in]^T + b[out] (b may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);
// Plain triple loop (the oracle): [M,K] x [K,N] in float64, result in a's dtype.
Tensor mm_reference(const Tensor& a, const Tensor& b);

}  // namespace cohort::native
