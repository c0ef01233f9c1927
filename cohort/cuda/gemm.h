// Matrix products on CUDA devices through cuBLASLt, for the dense kernels of
// this layer (mm, matmul, linear and their bf16 forms, linear + GELU, the
// convolution-free parts of the transformer ops). Everything here speaks
// cohort's row-major convention: C[m, n] = op(A)[m, k] op(B)[k, n], and
// translates it to cuBLASLt's column-major one (C^T = op(B)^T op(A)^T, so the
// operands swap places and no data moves).
// float32 runs on TF32 tensor cores only when native::allow_tf32() says so;
// bfloat16 operands accumulate in float32 and give float32 results; float64
// is a float64 product.
// Ownership: operands are views of the caller's tensors; nothing is kept
// past the call (the work is enqueued on the current stream of the device).
// Plans: the descriptors, layouts and heuristic's algorithm of each shape
// are built once and cached (per thread, bounded), keyed by GemmKey.
// Thread safety: reentrant (cuBLASLt handles, workspaces and plan caches are
// per thread).
// Failure: a plain product cuBLASLt has no algorithm for runs on copies of
// the misaligned operands padded to 16 bytes (gemm_padding.h); an operand
// cuBLASLt cannot take, or a product it has no algorithm for even so, throws
// cohort::Error naming the op and the shapes.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "cohort/core/tensor.h"
#include "cohort/cuda/plan_cache.h"

namespace cohort::cuda {

// One GEMM operand: a matrix (the last two dims of a tensor) with one unit
// stride, and the stride between the matrices of a batch (0: one matrix for
// every product of the batch).
struct GemmOperand {
  Tensor keep;  // holds the storage (a contiguous copy where the view had no unit stride)
  const void* data = nullptr;
  bool trans = false;  // the rows of the logical matrix are columns in memory
  int64_t ld = 1;      // row stride of the stored matrix (cblas RowMajor's lda)
  int64_t batch_stride = 0;
};

// t: [rows, cols] or [batch, rows, cols] (batch stride of dim 0, 0 when the
// batch is 1). A view with neither unit stride is copied to a dense one.
GemmOperand gemm_operand(const Tensor& t);

// The epilogue fused into the GEMM (cuBLASLt's): a bias row added to every
// row of C, and GELU (tanh form) after it with the pre-activation written to
// `aux`.
enum class GemmEpilogue { kNone, kBias, kGeluAux, kGeluAuxBias };

struct GemmCall {
  const char* op = "gemm";
  DType ab = DType::kFloat32;  // A's and B's dtype: float32, float64 or bfloat16
  DType c = DType::kFloat32;   // C's: A's, float32 for bfloat16 operands
  int64_t m = 0, n = 0, k = 0, batch = 1;
  GemmOperand a, b;
  void* c_data = nullptr;
  int64_t ldc = 1, c_batch_stride = 0;
  double alpha = 1, beta = 0;  // C = alpha op(A) op(B) + beta C
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* bias = nullptr;  // [n] of C's dtype
  void* aux = nullptr;         // [m, n] of C's dtype, row stride ldc (GELU's input)
};

// Enqueues the product on the current stream of `device`. Returns false,
// having done nothing, when cuBLASLt has no algorithm for a fused epilogue
// (the caller then runs the plain product and the epilogue apart); when it
// has none for the plain product, runs gemm_padded. m, n, k must be at
// least 1.
bool gemm(Device device, const GemmCall& call);

// The plain product (no epilogue) on padded copies of its misaligned
// operands (gemm_padding.h): what gemm() falls back to. Throws NotSupported
// when nothing is misaligned or cuBLASLt has no algorithm even so.
void gemm_padded(Device device, const GemmCall& call);

// What the heuristic's choice depends on: the shapes and layouts, dtypes,
// compute type, epilogue, device and the operands' alignments (cuBLASLt's
// MIN_ALIGNMENT preferences; capped at 256 bytes). Only int64_t fields.
struct GemmKey {
  int64_t m, n, k, batch;
  int64_t trans_a, trans_b, lda, ldb, ldc, stride_a, stride_b, stride_c;
  int64_t ab, c, tf32, epilogue, device;
  int64_t align_a, align_b, align_c, align_bias, align_aux;
  bool operator==(const GemmKey&) const = default;
};
GemmKey gemm_key(Device device, const GemmCall& call, bool allow_tf32);
// The calling thread's plan cache's counts.
PlanCacheStats gemm_plan_cache_stats();
inline constexpr size_t kGemmPlanCacheCapacity = 256;

// y = x w^T + b (linear / linear_bf16: x [..., in], w [out, in], b [out] of
// y's dtype or undefined; bf16 x and w give float32 y), with the bias in the
// epilogue. gelu: out = gelu_tanh(pre) with pre = x w^T + b, the GELU in the
// epilogue where cuBLASLt has one for the shape (else a second kernel).
struct LinearForward {
  Tensor out;
  Tensor pre;  // gelu only
};
LinearForward linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const char* op,
                             bool gelu = false);

}  // namespace cohort::cuda
