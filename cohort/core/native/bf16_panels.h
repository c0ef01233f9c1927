// Internal to core: the word panels of cohort's vdpbf16ps kernels (the bf16
// GEMM, gemm_bf16_avx512.cc, and the attention products,
// kernels/attention_dp_avx512bf16.cc). vdpbf16ps multiplies pairs of bf16
// along the inner dimension k, so a panel stores, per pair q, the 32-bit
// words (x(2q), x(2q + 1)) of `width` rows or columns side by side. Both
// packers zero what lies past the matrix (rows or columns past the count, the
// element past an odd kc), so a kernel may run over whole panels. Compiled
// for AVX512-BW (in the AVX512-BF16 file): callers check the CPU first.
#pragma once

#include <cstdint>

namespace cohort::native::isa_avx512::bf16 {

// Panel words dst[q * width + r], r < width, from `rows` source rows whose
// pairs are contiguous (row r's word q at src + r * ld + 2q).
void pack_along_k(const uint16_t* src, int64_t ld, int rows, int64_t kc, int width, uint32_t* dst);

// Panel words dst[q * width + j], j < width (at most 32), from row pairs:
// word (q, j) is (src[2q * ld + j], src[(2q + 1) * ld + j]), `cols` columns.
void pack_across_k(const uint16_t* src, int64_t ld, int cols, int64_t kc, int width, uint32_t* dst);

}  // namespace cohort::native::isa_avx512::bf16
