// gemm_kernels.h's microkernel for one ISA: a register tile of MR x (NV
// vectors) accumulators, one broadcast of A and NV loads of B per step of k.
// AVX2: 6 x 16 (12 ymm accumulators + 2 B + 1 broadcast of 16 registers);
// AVX-512: 12 x 32 (24 zmm accumulators + 2 + 1 of 32).
#include <immintrin.h>

#include <cstdint>

#include "cohort/base/isa.h"
#include "cohort/core/native/gemm_kernels.h"

COHORT_ISA_BEGIN
namespace cohort::native::COHORT_ISA_NS {
namespace {

#if defined(COHORT_ISA_AVX512)
using V = __m512;
constexpr int kW = 16, kMR = 12;
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vbcast(const float* p) { return _mm512_set1_ps(*p); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline V vzero() { return _mm512_setzero_ps(); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
#else
using V = __m256;
constexpr int kW = 8, kMR = 6;
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vbcast(const float* p) { return _mm256_broadcast_ss(p); }
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vzero() { return _mm256_setzero_ps(); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
#endif
constexpr int kNV = 2, kNR = kNV * kW;

void micro(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* c,
           int64_t ldc, int m, int n, float alpha, float beta, bool first) {
  // Fully unrolled early, so that GCC keeps acc in registers (without the
  // pragmas it stores every accumulator to the stack on every step).
  // C's tile is read after the loop (when accumulating): fetch it now.
  if (!first || beta != 0.0f)
    for (int i = 0; i < m; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNR - 1), _MM_HINT_T0);
    }
  V acc[kMR][kNV];
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[i][v] = vzero();
  for (int64_t p = 0; p < kc; ++p) {
    V b[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) b[v] = vload(bp + v * kW);
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      const V a = vbcast(ap + i);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[i][v] = vfma(a, b[v], acc[i][v]);
    }
    ap += kMR;
    bp += kNR;
  }
  // alpha * acc through a buffer (keeps the accumulators in registers: GCC
  // spills an array whose address escapes), then into C.
  alignas(64) float tile[kMR * kNR];
  const V va = vset1(alpha);
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) vstore(tile + i * kNR + v * kW, vmul(acc[i][v], va));
  if (m == kMR && n == kNR) {
    const V vb = vset1(beta);
    for (int i = 0; i < kMR; ++i)
      for (int v = 0; v < kNV; ++v) {
        float* p = c + i * ldc + v * kW;
        V r = vload(tile + i * kNR + v * kW);
        if (!first)
          r = r + vload(p);
        else if (beta != 0.0f)
          r = vfma(vload(p), vb, r);
        vstore(p, r);
      }
    return;
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float& out = c[i * ldc + j];
      const float r = tile[i * kNR + j];
      out = !first ? r + out : beta != 0.0f ? __builtin_fmaf(out, beta, r) : r;
    }
}

}  // namespace

extern const GemmKernels kGemmKernels;
const GemmKernels kGemmKernels{kMR, kNR, &micro};

}  // namespace cohort::native::COHORT_ISA_NS
COHORT_ISA_END
