// The row loops of transformer_rows.h compiled for one ISA: float vectors
// (ymm / zmm) with FMA, several accumulators per sum, and Cephes' expf
// polynomial for exp (which no plain loop vectorises without -ffast-math).
// Sums with a masked tail would need the tail lanes cleared before they are
// squared, so their tails run as scalar code instead; the elementwise loops
// use masked loads and stores.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "cohort/base/isa.h"
#include "cohort/core/kernels/transformer_rows.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

#if defined(COHORT_ISA_AVX512)
// The second operand when either is NaN, as minps/maxps: min(c, x) and
// max(c, x) keep a NaN x.
inline VN vmin(VN a, VN b) { return _mm512_min_ps(a, b); }
inline void vstoreu(float* p, VN v) { _mm512_storeu_ps(p, v); }
inline VN vdiv(VN a, VN b) { return _mm512_div_ps(a, b); }
inline VN vfloor(VN a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
// 2^n for integral n in [-126, 127].
inline VN vpow2(VN n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
// v where a < b, else w (false for NaN: w).
inline VN vselect_lt(VN a, VN b, VN v, VN w) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), w, v);
}
#else
inline VN vmin(VN a, VN b) { return _mm256_min_ps(a, b); }
inline void vstoreu(float* p, VN v) { _mm256_storeu_ps(p, v); }
inline VN vdiv(VN a, VN b) { return _mm256_div_ps(a, b); }
inline VN vfloor(VN a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline VN vpow2(VN n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
inline VN vselect_lt(VN a, VN b, VN v, VN w) {
  return _mm256_blendv_ps(w, v, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
#endif

// The sum of the lanes, pairwise: simd.h's vsum, whose tree (lane l plus
// lane l + kN / 2, then l + kN / 4, ...) is the one a loop over the stored
// lanes had. That loop carried each partial sum through memory: two of them
// per row were a third of a LayerNorm backward row's time. GCC 12 warns of
// the undefined source vector inside its shuffle intrinsics here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline float vhsum(VN v) { return vsum(v); }
#pragma GCC diagnostic pop
// The largest lane (NaN lanes may or may not win; callers check the result).
inline float vhmax(VN v) {
  float lanes[kN];
  vstoreu(lanes, v);
  float m = lanes[0];
  for (int l = 1; l < kN; ++l) m = lanes[l] > m ? lanes[l] : m;
  return m;
}

// exp(x) for float lanes: x = n ln2 + r with |r| <= ln2 / 2, Cephes' degree-6
// polynomial for e^r, times 2^n. Below ln(FLT_MIN) the result is 0 (the
// reference gives a subnormal or 0), above ln(FLT_MAX) +inf; NaN stays NaN.
inline VN vexp(VN x) {
  const VN hi = vset1(88.3762626647949f), lo = vset1(-87.3365447505531f);
  const VN xc = vmin(hi, vmax(lo, x));
  const VN n = vfloor(vfmadd(xc, vset1(1.44269504088896341f), vset1(0.5f)));
  VN r = vfnmadd(n, vset1(0.693359375f), xc);
  r = vfnmadd(n, vset1(-2.12194440e-4f), r);
  VN p = vset1(1.9875691500e-4f);
  p = vfmadd(p, r, vset1(1.3981999507e-3f));
  p = vfmadd(p, r, vset1(8.3334519073e-3f));
  p = vfmadd(p, r, vset1(4.1665795894e-2f));
  p = vfmadd(p, r, vset1(1.6666665459e-1f));
  p = vfmadd(p, r, vset1(5.0000001201e-1f));
  p = vfmadd(p, vmul(r, r), vadd(r, vset1(1.0f)));
  VN e = vmul(p, vpow2(n));
  e = vselect_lt(x, lo, vzero(), e);
  return vselect_lt(vset1(88.7228391116729996f), x, vset1(__builtin_inff()), e);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// gelu_tanh(x) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + c x^3): the same
// function as 0.5 x (1 + tanh(u)) (0.5 (1 + tanh u) = sigmoid(2u)), without
// the cancellation in 1 + tanh(u) for negative x. e is exp(-2u).
inline VN gelu_exp(VN x) {
  const VN x2 = vmul(x, x);
  const VN a =
      vmul(x, vfmadd(vset1(-2.0f * kSqrt2OverPi * kGeluCoeff), x2, vset1(-2.0f * kSqrt2OverPi)));
  return vexp(a);
}
inline VN gelu_value(VN x) { return vdiv(x, vadd(vset1(1.0f), gelu_exp(x))); }
// d/dx [x s] = s + x s (1 - s) 2 du/dx, s = sigmoid(2u).
inline VN gelu_derivative(VN x) {
  const VN one = vset1(1.0f);
  const VN s = vdiv(one, vadd(one, gelu_exp(x)));
  const VN du2 = vfmadd(vset1(6.0f * kSqrt2OverPi * kGeluCoeff), vmul(x, x),
                        vset1(2.0f * kSqrt2OverPi));  // 2 du/dx
  return vfmadd(vmul(vmul(x, s), vsub(one, s)), du2, s);
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t k = n - i;
    vstore_first(y + i, k, gelu_value(vload_first(x + i, k)));
  }
}

void gelu_tanh_backward(const float* g, const float* x, float* dx, float* db, int64_t n) {
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t k = n - i;
    const VN d = vmul(vload_first(g + i, k), gelu_derivative(vload_first(x + i, k)));
    vstore_first(dx + i, k, d);
    if (db) vstore_first(db + i, k, vadd(vload_first(db + i, k), d));
  }
}

void bias_gelu_tanh(float* h, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t k = n - i;
    VN v = vload_first(h + i, k);
    if (b) {
      v = vadd(v, vload_first(b + i, k));
      vstore_first(h + i, k, v);
    }
    vstore_first(y + i, k, gelu_value(v));
  }
}

// Four vector accumulators (the add latency), combined pairwise.
constexpr int kAcc = 4;
inline float vsum4(const VN acc[kAcc]) {
  return vhsum(vadd(vadd(acc[0], acc[1]), vadd(acc[2], acc[3])));
}

template <int K>
using Acc = std::integral_constant<int, K>;

// f(i, k) for the vectors starting at i = 0, kN, ... below end, in order,
// with k = (i / kN) % kAcc as a compile-time constant: accumulators acc[k]
// then stay in registers. Indexed by a run-time k they lived on the stack,
// and a LayerNorm backward row took 3x as long.
template <class F>
inline void each_vector(int64_t end, F&& f) {
  int64_t i = 0;
  for (; i + (kAcc - 1) * kN < end; i += kAcc * kN) {
    f(i, Acc<0>{});
    f(i + kN, Acc<1>{});
    f(i + 2 * kN, Acc<2>{});
    f(i + 3 * kN, Acc<3>{});
  }
  if (i < end) f(i, Acc<0>{});
  if (i + kN < end) f(i + kN, Acc<1>{});
  if (i + 2 * kN < end) f(i + 2 * kN, Acc<2>{});
}

void layer_norm(const float* x, const float* delta, float* s_out, const float* w, const float* b,
                float* y, int64_t n, double eps, double* mean_out, double* rstd_out) {
  const int64_t nv = n / kN * kN;  // vector part; the tail is scalar
  // s = x + delta (stored when asked), summed.
  VN acc[kAcc] = {vzero(), vzero(), vzero(), vzero()};
  float tail = 0;
  if (delta) {
    each_vector(nv, [&](int64_t i, auto k) {
      const VN s = vadd(vloadu(x + i), vloadu(delta + i));
      if (s_out) vstoreu(s_out + i, s);
      acc[k] = vadd(acc[k], s);
    });
    for (int64_t i = nv; i < n; ++i) {
      const float s = x[i] + delta[i];
      if (s_out) s_out[i] = s;
      tail += s;
    }
  } else {
    each_vector(nv, [&](int64_t i, auto k) { acc[k] = vadd(acc[k], vloadu(x + i)); });
    for (int64_t i = nv; i < n; ++i) tail += x[i];
  }
  // From here on the row is s: the stored copy when there is one.
  const float* src = delta && s_out ? s_out : x;
  const float* add = delta && !s_out ? delta : nullptr;
  auto load = [&](int64_t i) {
    return add ? vadd(vloadu(src + i), vloadu(add + i)) : vloadu(src + i);
  };
  auto at = [&](int64_t i) { return add ? src[i] + add[i] : src[i]; };
  const float mean = (vsum4(acc) + tail) / static_cast<float>(n);
  const VN vm = vset1(mean);
  VN sq[kAcc] = {vzero(), vzero(), vzero(), vzero()};
  float tail_sq = 0;
  each_vector(nv, [&](int64_t i, auto k) {
    const VN d = vsub(load(i), vm);
    sq[k] = vfmadd(d, d, sq[k]);
  });
  for (int64_t i = nv; i < n; ++i) {
    const float d = at(i) - mean;
    tail_sq += d * d;
  }
  const float var = (vsum4(sq) + tail_sq) / static_cast<float>(n);
  const float rstd = static_cast<float>(1.0 / __builtin_sqrt(static_cast<double>(var) + eps));
  const VN vr = vset1(rstd);
  for (int64_t i = 0; i < nv; i += kN) {
    VN v = vmul(vsub(load(i), vm), vr);
    if (w) v = vmul(v, vloadu(w + i));
    if (b) v = vadd(v, vloadu(b + i));
    vstoreu(y + i, v);
  }
  for (int64_t i = nv; i < n; ++i) {
    float v = (at(i) - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

void layer_norm_backward(const float* g, const float* x, const float* w, double mean_d,
                         double rstd_d, float* dx, float* dw, float* db, int64_t n) {
  const float mean = static_cast<float>(mean_d), rstd = static_cast<float>(rstd_d);
  const VN vm = vset1(mean), vr = vset1(rstd);
  VN a1[kAcc] = {vzero(), vzero(), vzero(), vzero()};
  VN a2[kAcc] = {vzero(), vzero(), vzero(), vzero()};
  // The tail (n % kN floats) in vector form too, under a lane mask: lanes past
  // n load zeros (g = 0 adds nothing), and the same instructions compute dw
  // and db whether or not dx is asked for (a scalar tail left the compiler
  // free to contract it differently in each case).
  each_vector(n, [&](int64_t i, auto k) {
    const int64_t len = n - i;
    const VN gi = vload_first(g + i, len);
    const VN xhat = vmul(vsub(vload_first(x + i, len), vm), vr);
    const VN gw = w ? vmul(gi, vload_first(w + i, len)) : gi;
    a1[k] = vadd(a1[k], gw);
    a2[k] = vfmadd(gw, xhat, a2[k]);
    if (dw) vstore_first(dw + i, len, vfmadd(gi, xhat, vload_first(dw + i, len)));
    if (db) vstore_first(db + i, len, vadd(vload_first(db + i, len), gi));
  });
  if (!dx) return;
  const float inv_n = 1.0f / static_cast<float>(n);
  const float c1 = -rstd * vsum4(a1) * inv_n;  // -rstd mean(gw)
  const float c2 = rstd * vsum4(a2) * inv_n;   // rstd mean(gw xhat)
  const VN v1 = vset1(c1), v2 = vset1(c2);
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t len = n - i;
    const VN gi = vload_first(g + i, len);
    const VN xhat = vmul(vsub(vload_first(x + i, len), vm), vr);
    const VN gw = w ? vmul(gi, vload_first(w + i, len)) : gi;
    vstore_first(dx + i, len, vfnmadd(xhat, v2, vfmadd(gw, vr, v1)));
  }
}

// Chunks of the vocabulary: the maximum of a chunk, then its exponentials
// against the running maximum while the chunk is in L1 (one read from
// memory per element); the running sum is rescaled when the maximum grows.
constexpr int64_t kLseChunk = 2048;

float log_sum_exp_fast(const float* x, int64_t n) {
  float m = -__builtin_inff();
  double total = 0;
  for (int64_t c = 0; c < n; c += kLseChunk) {
    const int64_t len = n - c < kLseChunk ? n - c : kLseChunk;
    const float* xc = x + c;
    const int64_t nv = len / kN * kN;
    VN mx[kAcc] = {vset1(m), vset1(m), vset1(m), vset1(m)};
    each_vector(nv, [&](int64_t i, auto k) { mx[k] = vmax(mx[k], vloadu(xc + i)); });
    float cm = vhmax(vmax(vmax(mx[0], mx[1]), vmax(mx[2], mx[3])));
    for (int64_t i = nv; i < len; ++i) cm = xc[i] > cm ? xc[i] : cm;
    if (cm > m) {
      // exp(m - cm) rescales the sum so far (0 when m was -inf).
      total *= __builtin_exp(static_cast<double>(m) - cm);
      m = cm;
    }
    const VN vm = vset1(m);
    VN acc[kAcc] = {vzero(), vzero(), vzero(), vzero()};
    each_vector(nv,
                [&](int64_t i, auto k) { acc[k] = vadd(acc[k], vexp(vsub(vloadu(xc + i), vm))); });
    VN t = vzero();
    if (nv < len) {
      // The tail's exponentials, the lanes past it cleared.
      const VN e = vexp(vsub(vload_first(xc + nv, len - nv), vm));
      float lanes[kN];
      vstoreu(lanes, e);
      for (int64_t l = len - nv; l < kN; ++l) lanes[l] = 0.0f;
      t = vloadu(lanes);
    }
    total += static_cast<double>(vsum4(acc)) + static_cast<double>(vhsum(t));
  }
  return m + static_cast<float>(__builtin_log(total));
}

// Rows with an inf or NaN (where m - m or x - m would be NaN) go to the
// reference loop, which says what PyTorch does with them.
float log_sum_exp(const float* x, int64_t n) {
  const float r = log_sum_exp_fast(x, n);
  if (r - r == 0.0f) return r;
  return transformer_rows_reference().log_sum_exp(x, n);
}

void softmax_scaled(const float* x, float lse, float scale, float* dx, int64_t n) {
  const VN vl = vset1(lse), vs = vset1(scale);
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t k = n - i;
    vstore_first(dx + i, k, vmul(vexp(vsub(vload_first(x + i, k), vl)), vs));
  }
}

void add_to(const float* x, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; i += kN) {
    const int64_t k = n - i;
    vstore_first(acc + i, k, vadd(vload_first(acc + i, k), vload_first(x + i, k)));
  }
}

}  // namespace

extern const TransformerRows kTransformerRows;
const TransformerRows kTransformerRows{
    &gelu_tanh,           &gelu_tanh_backward, &bias_gelu_tanh, &layer_norm,
    &layer_norm_backward, &log_sum_exp,        &softmax_scaled, &add_to};

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
