// bfloat16 matrix products with float32 accumulation (not recorded by
// autograd; cohort/autograd/precision.h decides when the ops use them), and
// the float32 <-> bfloat16 conversions they run on.
//
// Operands are bfloat16 tensors (inputs already rounded to nearest even);
// products are accumulated in float32 and the result is float32. Paths (the
// bf16 column of the kernel tables, chosen per call, never process-wide):
//  - kEmulated: converts the operands to float32 (exact) and runs the float32
//    GEMM (native::gemm and its backend rule). A product of two bf16 values
//    is exact in float32, so this is a bf16 x bf16 -> fp32 GEMM, only without
//    the bf16 instructions' speed. Runs on every CPU.
//  - kAvx512Bf16: cohort's own packed GEMM on vdpbf16ps
//    (gemm_bf16_avx512.cc); x86-64 CPUs with avx512_bf16.
//  - kOnednn: oneDNN's bf16 matmul (its AVX512-BF16 or AMX-BF16 kernels, as
//    the CPU has them); needs a build with oneDNN (COHORT_HAVE_ONEDNN) and a
//    CPU with avx512_bf16 or amx_bf16. oneDNN 2.6 creates no bf16 matmul on a
//    CPU without avx512_core (checked on an AVX2-only host: "unimplemented"),
//    so elsewhere this path is reported unsupported rather than tried.
// Shapes: mm_bf16 [M,K] x [K,N] -> [M,N]; matmul_bf16 as native::matmul
// (batched, broadcast batch dims); linear_bf16 x [..., in], w [out, in],
// b [out] float32 or undefined -> [..., out] float32.
// Thread safety: reentrant; each call uses at most cohort::num_threads()
// (oneDNN: its own OpenMP threads). Failure: wrong dtypes or shapes throw
// InvalidArgument naming the op; a path this CPU or build cannot run throws
// NotSupported naming the path and the CPU's features.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

enum class Bf16Path { kEmulated = 0, kOnednn = 1, kAvx512Bf16 = 2 };

// "emulated", "onednn", "avx512_bf16".
const char* bf16_path_name(Bf16Path path);
// Inverse of bf16_path_name; throws InvalidArgument naming the choices.
Bf16Path parse_bf16_path(std::string_view name);
// Empty when this CPU and build can run `path`, else why not.
std::string bf16_path_unsupported_reason(Bf16Path path);
bool bf16_path_supported(Bf16Path path);
// Every path this CPU can run, kEmulated first.
std::vector<Bf16Path> supported_bf16_paths();
// The fastest supported path: kOnednn on a CPU with amx_bf16 (oneDNN's AMX
// kernels), else kAvx512Bf16 where supported, else kOnednn where supported,
// else kEmulated (the order measured in docs/precision.md).
Bf16Path best_bf16_path();
// Throws NotSupported "<op>: bf16 path <name> ...: <why>; this CPU (<model>)
// has <features>" when `path` cannot run here.
void check_bf16_path(Bf16Path path, std::string_view op);

// float32 -> bfloat16, rounding to nearest even (any layout; result
// contiguous); bfloat16 -> float32 (exact). Vectorised on the avx2/avx512
// kernel paths, BFloat16's own conversion on the baseline path.
Tensor to_bf16(const Tensor& x);
Tensor bf16_to_float(const Tensor& x);
// x16: x's values rounded to bf16 (x's sizes, contiguous), written by the op
// that made x in the same pass over the rows (LayerNorm and GELU under a bf16
// policy, whose outputs feed bf16 GEMMs). to_bf16(x) then returns x16 instead
// of converting again, as long as x's storage is not written (its version);
// views and copies of x do not carry it.
void set_bf16_twin(const Tensor& x, const Tensor& x16);
// The same on raw buffers (n elements each).
void to_bf16(const float* x, BFloat16* y, int64_t n);
void bf16_to_float(const BFloat16* x, float* y, int64_t n);

// C[M,N] (float32) = alpha * op(A) op(B) + beta * C with A, B bfloat16;
// row-major as native::gemm.
void gemm_bf16(Bf16Path path, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               float alpha, const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
               float beta, float* c, int64_t ldc);

Tensor mm_bf16(const Tensor& a, const Tensor& b, Bf16Path path);
Tensor matmul_bf16(const Tensor& a, const Tensor& b, Bf16Path path);
// rows_done(y, r0, r1, c0, c1), when given, is called once for each block of
// linear_bf16's output y (a contiguous [rows, out] matrix: element (r, c) at
// y[r * out + c]) whose values are final, from the thread that made it,
// concurrently for disjoint blocks: an elementwise epilogue. On the
// kAvx512Bf16 path it runs inside the GEMM while the block is in cache;
// elsewhere on row ranges after the GEMM.
using Bf16RowsDone = std::function<void(float* y, int64_t r0, int64_t r1, int64_t c0, int64_t c1)>;
Tensor linear_bf16(const Tensor& x, const Tensor& w, const Tensor& b, Bf16Path path,
                   const Bf16RowsDone& rows_done = {});

// Device kernels (device_dispatch.h) behind mm_bf16, matmul_bf16 and
// linear_bf16: bf16 operands, float32 accumulation and result, as above; the
// CPU's Bf16Path does not apply to them (a device has its one bf16 GEMM), and
// linear_bf16 on a device takes no rows_done epilogue (InvalidArgument).
extern DeviceOp<Tensor(const Tensor& a, const Tensor& b)> mm_bf16_device;
extern DeviceOp<Tensor(const Tensor& a, const Tensor& b)> matmul_bf16_device;
extern DeviceOp<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)> linear_bf16_device;

}  // namespace cohort::native
