// Matrix products (not recorded by autograd) on two backends: OpenBLAS
// (float32 sgemm, float64 dgemm) and, for float32 shapes where it measured
// faster, cohort's own packed GEMM (gemm_packed); gemm_backend is the fixed
// rule between them (docs/kernels.md, "GEMM backends").
// Threading: OpenBLAS's own threads are switched off once (process-wide,
// first use) and big products are split over cohort::parallel_for instead, so
// each call is bounded by the calling thread's budget and concurrent calls
// from several threads (DataParallel replicas) neither oversubscribe nor
// share state. Failure: the Tensor functions throw InvalidArgument naming the
// operation and the shapes or dtypes that do not fit.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when the
// flag is set (lda/ldb/ldc are row strides as in cblas RowMajor).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

// cohort's own packed fp32 GEMM (gemm_packed.cc, microkernels per ISA in
// gemm_kernels_isa.cc), same contract as gemm; threads split C by whole
// register tiles, so its bits do not depend on the thread count. Only on the
// avx2 / avx512 kernel paths: elsewhere gemm_packed_available() is false and
// gemm_packed throws InvalidArgument naming the path.
bool gemm_packed_available();
void gemm_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc);

// Which implementation native::gemm runs a float32 product on (float64 is
// always OpenBLAS): a fixed rule of the kernel path in use, the product's
// shape and transposes and the thread count, derived from measurements
// (docs/kernels.md, "GEMM backends"); no timing at run time, so the same call
// on the same CPU takes the same backend and gives the same bits every run,
// on every DDP rank. kOpenBlas: OpenBLAS sgemm, single-threaded, split over
// cohort::parallel_for; kPacked: gemm_packed.
enum class GemmBackend { kOpenBlas = 0, kPacked = 1 };
const char* gemm_backend_name(GemmBackend backend);
GemmBackend gemm_backend(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int threads);
// gemm on a given backend (tests, benchmarks); kPacked throws InvalidArgument
// where gemm_packed_available() is false.
void gemm_with(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
               float* c, int64_t ldc);

// [M,K] x [K,N] -> [M,N]. Transposed views are passed to BLAS without a copy.
Tensor mm(const Tensor& a, const Tensor& b);
// torch.matmul: 1-D/2-D/batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// y[..., out] = x[..., in] w[out, in]^T + b[out] (b may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);
// Whether float32 products on CUDA devices may run on TF32 tensor cores
// (inputs rounded to a 10-bit mantissa, float32 accumulation), as PyTorch's
// torch.backends.cuda.matmul.allow_tf32; false by default, so a float32
// product on a GPU is a float32 product. Process-wide: set it before ops run
// (training start-up); CPU products never use it.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Device kernels (device_dispatch.h) behind mm, matmul and linear: the same
// shapes and result as the CPU's, after the entry points' shape checks.
extern DeviceOp<Tensor(const Tensor& a, const Tensor& b)> mm_device;
extern DeviceOp<Tensor(const Tensor& a, const Tensor& b)> matmul_device;
extern DeviceOp<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)> linear_device;

// Plain triple loop (the oracle): [M,K] x [K,N] in float64, result in a's dtype.
Tensor mm_reference(const Tensor& a, const Tensor& b);

}  // namespace cohort::native
