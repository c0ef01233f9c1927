// The update loops of update_kernels.h compiled for one ISA: the reference
// formulas, with the per-step flags as template parameters so that every
// loop is branch-free and vectorizes (ymm / zmm, with FMA).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "cohort/base/isa.h"
#include "cohort/optim/update_kernels.h"

COHORT_ISA_BEGIN

namespace cohort::optim::COHORT_ISA_NS {
namespace {

// kMomentum: 0 none, 1 first step (buf = d), 2 running.
template <bool kDecay, int kMomentum, bool kNesterov>
void sgd_loop(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
              const SgdCoeffs<float>& c) {
  const float sign = c.sign, wd = c.weight_decay, mom = c.momentum, damp1 = c.damp1, lr = c.lr;
  for (int64_t i = 0; i < n; ++i) {
    float d = sign * g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kMomentum != 0) {
      const float m = kMomentum == 1 ? d : buf[i] * mom + damp1 * d;
      buf[i] = m;
      d = kNesterov ? d + mom * m : m;
    }
    p[i] = p[i] - lr * d;
  }
}

void sgd(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c) {
  auto with_momentum = [&](auto decay) {
    constexpr bool kD = decltype(decay)::value;
    if (!c.has_momentum) return sgd_loop<kD, 0, false>(p, g, buf, n, c);
    if (c.first)
      return c.nesterov ? sgd_loop<kD, 1, true>(p, g, buf, n, c)
                        : sgd_loop<kD, 1, false>(p, g, buf, n, c);
    return c.nesterov ? sgd_loop<kD, 2, true>(p, g, buf, n, c)
                      : sgd_loop<kD, 2, false>(p, g, buf, n, c);
  };
  if (c.has_weight_decay) return with_momentum(std::true_type{});
  with_momentum(std::false_type{});
}

// sqrt in place over a block. The one hand-written piece: the plain loop's
// std::sqrt would vectorize only under -fno-math-errno, which the layer sets
// (CMakeLists.txt) but which neither this per-ISA object library inherits
// nor "#pragma GCC optimize" can switch on for the sqrt builtin. vsqrtps is
// correctly rounded, as sqrtss is: the values are the reference's.
void sqrt_block(float* x, int64_t n) {
  int64_t i = 0;
#if defined(COHORT_ISA_AVX512)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#endif
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x[i])));
}

// Per block: the moments (and the sqrt's argument), the square roots, then
// the parameter; the same operations per element as the reference.
template <bool kAmsgrad, int kDecay>
void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m,
               float* __restrict v, float* __restrict vmax, int64_t n, const AdamCoeffs<float>& c) {
  const float sign = c.sign, wd = c.weight_decay, decay = c.decay_factor, b1 = c.beta1,
              b2 = c.beta2, one_b1 = c.one_beta1, one_b2 = c.one_beta2, bc2_sqrt = c.bc2_sqrt,
              eps = c.eps, neg_step_size = c.neg_step_size;
  constexpr int64_t kBlock = 512;
  alignas(64) float root[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t k = n - b < kBlock ? n - b : kBlock;
    float* __restrict pb = p + b;
    const float* __restrict gb = g + b;
    float* __restrict mb = m + b;
    float* __restrict vb = v + b;
    for (int64_t i = 0; i < k; ++i) {
      float gi = sign * gb[i];
      if constexpr (kDecay == 1) gi = gi + wd * pb[i];
      const float mi = mb[i] * b1 + one_b1 * gi;
      float vi = vb[i] * b2 + one_b2 * (gi * gi);
      mb[i] = mi;
      vb[i] = vi;
      if constexpr (kAmsgrad) {
        // std::max(vmax, vi), spelled out (a template from outside this
        // region would be compiled for the baseline).
        float* __restrict xb = vmax + b;
        vi = xb[i] < vi ? vi : xb[i];
        xb[i] = vi;
      }
      root[i] = vi;
    }
    sqrt_block(root, k);
    for (int64_t i = 0; i < k; ++i) {
      float pi = pb[i];
      if constexpr (kDecay == 2) pi = pi * decay;
      const float denom = root[i] / bc2_sqrt + eps;
      pb[i] = pi + neg_step_size * (mb[i] / denom);
    }
  }
}

void adam(float* p, const float* g, float* m, float* v, float* vmax, int64_t n,
          const AdamCoeffs<float>& c) {
  auto run = [&](auto amsgrad) {
    constexpr bool kA = decltype(amsgrad)::value;
    if (c.decay == 0) return adam_loop<kA, 0>(p, g, m, v, vmax, n, c);
    if (c.decay == 1) return adam_loop<kA, 1>(p, g, m, v, vmax, n, c);
    return adam_loop<kA, 2>(p, g, m, v, vmax, n, c);
  };
  if (vmax != nullptr) return run(std::true_type{});
  run(std::false_type{});
}

// acc[k] += acc[k + W] for k < W, then W / 2, ... 1: a pairwise sum of the
// 2W accumulators into acc[0], each level one or two vector adds.
template <int W>
void fold(double* acc) {
  for (int k = 0; k < W; ++k) acc[k] += acc[k + W];
  if constexpr (W > 1) fold<W / 2>(acc);
}

// 32 independent double accumulators (8 ymm / 4 zmm FMA chains), seeded
// with the first block (no zeroing pass), combined pairwise: the order
// differs from the reference's single running sum, by rounding only (the sum
// is in double; clip_grad_norm has no order contract: its threads already add
// their parts in any order).
double sum_squares(const float* __restrict x, int64_t n) {
  constexpr int kAcc = 32;
  double tail = 0;
  if (n < kAcc) {
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      tail += v * v;
    }
    return tail;
  }
  double acc[kAcc];
  for (int k = 0; k < kAcc; ++k) {
    const double v = x[k];
    acc[k] = v * v;
  }
  int64_t i = kAcc;
  for (; i + kAcc <= n; i += kAcc)
    for (int k = 0; k < kAcc; ++k) {
      const double v = x[i + k];
      acc[k] += v * v;
    }
  for (; i < n; ++i) {
    const double v = x[i];
    tail += v * v;
  }
  fold<kAcc / 2>(acc);
  return acc[0] + tail;
}

}  // namespace

extern const UpdateKernels kUpdateKernels;
const UpdateKernels kUpdateKernels{&sgd, &adam, &sum_squares};

}  // namespace cohort::optim::COHORT_ISA_NS
COHORT_ISA_END
