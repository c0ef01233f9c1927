#include "cohort/optim/update_kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cohort/base/cpu.h"
#include "cohort/base/isa.h"

namespace cohort::optim {

COHORT_ISA_DECLARE_TABLE(UpdateKernels, kUpdateKernels)

namespace {

template <typename T>
void sgd_loop(T* p, const T* g, T* buf, int64_t n, const SgdCoeffs<T>& c) {
  for (int64_t i = 0; i < n; ++i) {
    T d = c.sign * g[i];
    if (c.has_weight_decay) d = d + c.weight_decay * p[i];
    if (c.has_momentum) {
      T m = c.first ? d : buf[i] * c.momentum + c.damp1 * d;
      buf[i] = m;
      d = c.nesterov ? d + c.momentum * m : m;
    }
    p[i] = p[i] - c.lr * d;
  }
}

// kAmsgrad and the weight-decay flavour are compile-time so the loop has no
// branches and vectorizes (with -fno-math-errno for sqrt, see CMakeLists.txt).
template <typename T, bool kAmsgrad, int kDecay>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, int64_t n, const AdamCoeffs<T>& c) {
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    T gi = c.sign * g[i];
    if constexpr (kDecay == 1) gi = gi + c.weight_decay * pi;
    if constexpr (kDecay == 2) pi = pi * c.decay_factor;
    T mi = m[i] * c.beta1 + c.one_beta1 * gi;
    T vi = v[i] * c.beta2 + c.one_beta2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kAmsgrad) {
      vi = std::max(vmax[i], vi);
      vmax[i] = vi;
    }
    T denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    p[i] = pi + c.neg_step_size * (mi / denom);
  }
}

template <typename T>
void adam_any(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamCoeffs<T>& c) {
  auto run = [&](auto amsgrad, auto decay) {
    adam_loop<T, decltype(amsgrad)::value, decltype(decay)::value>(p, g, m, v, vmax, n, c);
  };
  using D0 = std::integral_constant<int, 0>;
  using D1 = std::integral_constant<int, 1>;
  using D2 = std::integral_constant<int, 2>;
  if (vmax != nullptr) {
    if (c.decay == 0) return run(std::true_type{}, D0{});
    if (c.decay == 1) return run(std::true_type{}, D1{});
    return run(std::true_type{}, D2{});
  }
  if (c.decay == 0) return run(std::false_type{}, D0{});
  if (c.decay == 1) return run(std::false_type{}, D1{});
  return run(std::false_type{}, D2{});
}

template <typename T>
double sum_squares_loop(const T* x, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  return acc;
}

const UpdateKernels kBaselineKernels{
    static_cast<void (*)(float*, const float*, float*, int64_t, const SgdCoeffs<float>&)>(
        &sgd_reference),
    static_cast<void (*)(float*, const float*, float*, float*, float*, int64_t,
                         const AdamCoeffs<float>&)>(&adam_reference),
    static_cast<double (*)(const float*, int64_t)>(&sum_squares_reference)};

}  // namespace

void sgd_reference(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c) {
  sgd_loop(p, g, buf, n, c);
}
void sgd_reference(double* p, const double* g, double* buf, int64_t n, const SgdCoeffs<double>& c) {
  sgd_loop(p, g, buf, n, c);
}
void adam_reference(float* p, const float* g, float* m, float* v, float* vmax, int64_t n,
                    const AdamCoeffs<float>& c) {
  adam_any(p, g, m, v, vmax, n, c);
}
void adam_reference(double* p, const double* g, double* m, double* v, double* vmax, int64_t n,
                    const AdamCoeffs<double>& c) {
  adam_any(p, g, m, v, vmax, n, c);
}
double sum_squares_reference(const float* x, int64_t n) { return sum_squares_loop(x, n); }
double sum_squares_reference(const double* x, int64_t n) { return sum_squares_loop(x, n); }

const UpdateKernels& update_kernels() {
  return *COHORT_ISA_TABLE(UpdateKernels, &kBaselineKernels, kUpdateKernels);
}

}  // namespace cohort::optim
