// Internal to the *_isa.cc kernels: the vector vocabulary they are written
// in, one definition per ISA (include after cohort/base/isa.h, inside
// COHORT_ISA_BEGIN / COHORT_ISA_END).
//
// The batch-16 layout keeps 16 samples per element. An AVX-512 register holds
// all 16 (kN = 16); an AVX2 register half of them (kN = 8), so AVX2 kernels
// run their lane-wise work twice, once per half (kHalves), at offsets h * kN
// within each 16-float element. Sums that end in a lane reduction anyway
// (weight and bias gradients) add both halves into one register instead.
// kRegs is the register file size the tiles are sized against.
#pragma once

#include <immintrin.h>

#include <cstdint>

#if !defined(COHORT_ISA_NS)
#error "simd.h belongs to *_isa.cc kernel sources (see cohort/base/isa.h)"
#endif

namespace cohort::kernels::detail::COHORT_ISA_NS {

#if defined(COHORT_ISA_AVX512)
using VN = __m512;
constexpr int kN = 16;
constexpr int kRegs = 32;
inline VN vload(const float* p) { return _mm512_load_ps(p); }
inline VN vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, VN v) { _mm512_store_ps(p, v); }
inline VN vzero() { return _mm512_setzero_ps(); }
inline VN vset1(float f) { return _mm512_set1_ps(f); }
inline VN vadd(VN a, VN b) { return _mm512_add_ps(a, b); }
inline VN vsub(VN a, VN b) { return _mm512_sub_ps(a, b); }
inline VN vmul(VN a, VN b) { return _mm512_mul_ps(a, b); }
inline VN vmax(VN a, VN b) { return _mm512_max_ps(a, b); }
inline VN vfmadd(VN a, VN b, VN c) { return _mm512_fmadd_ps(a, b, c); }    // a b + c
inline VN vfnmadd(VN a, VN b, VN c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
inline VN vfmsub(VN a, VN b, VN c) { return _mm512_fmsub_ps(a, b, c); }    // a b - c
// k >= kN gives every lane (a shift by 32 or more would be undefined: x86
// takes the count mod 32, so k = 1000 used to give 8 lanes).
inline __mmask16 first_k(int64_t k) {
  return k >= kN ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << k) - 1u);
}
// The first k (0..kN) floats at p; the rest read as zero and are not touched.
inline VN vload_first(const float* p, int64_t k) { return _mm512_maskz_loadu_ps(first_k(k), p); }
inline void vstore_first(float* p, int64_t k, VN v) { _mm512_mask_storeu_ps(p, first_k(k), v); }
// v where mask > 0 or is NaN (ReLU backward, as PyTorch's threshold_backward), else 0.
inline VN vkeep_positive(VN v, VN mask) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mask, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
}
// Sum of the lanes (GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized).
inline float vsum(VN v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));
  return _mm512_cvtss_f32(v);
}
// In-register transpose of a kN x kN block.
inline void vtranspose(VN r[kN]) {
  VN t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int j = 0; j < 2; ++j) {
      __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}
#elif defined(COHORT_ISA_AVX2)
using VN = __m256;
constexpr int kN = 8;
constexpr int kRegs = 16;
inline VN vload(const float* p) { return _mm256_load_ps(p); }
inline VN vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, VN v) { _mm256_store_ps(p, v); }
inline VN vzero() { return _mm256_setzero_ps(); }
inline VN vset1(float f) { return _mm256_set1_ps(f); }
inline VN vadd(VN a, VN b) { return _mm256_add_ps(a, b); }
inline VN vsub(VN a, VN b) { return _mm256_sub_ps(a, b); }
inline VN vmul(VN a, VN b) { return _mm256_mul_ps(a, b); }
inline VN vmax(VN a, VN b) { return _mm256_max_ps(a, b); }
inline VN vfmadd(VN a, VN b, VN c) { return _mm256_fmadd_ps(a, b, c); }
inline VN vfnmadd(VN a, VN b, VN c) { return _mm256_fnmadd_ps(a, b, c); }
inline VN vfmsub(VN a, VN b, VN c) { return _mm256_fmsub_ps(a, b, c); }
inline __m256i first_k(int64_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// vmaskmov neither reads nor faults on the masked-off floats.
inline VN vload_first(const float* p, int64_t k) {
  return k >= kN ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_k(k));
}
inline void vstore_first(float* p, int64_t k, VN v) {
  if (k >= kN) return _mm256_storeu_ps(p, v);
  _mm256_maskstore_ps(p, first_k(k), v);
}
inline VN vkeep_positive(VN v, VN mask) {
  return _mm256_and_ps(_mm256_cmp_ps(mask, _mm256_setzero_ps(), _CMP_NLE_UQ), v);
}
inline float vsum(VN v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline void vtranspose(VN r[kN]) {
  VN t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
#endif

constexpr int kHalves = 16 / kN;  // registers per batch-16 element

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
