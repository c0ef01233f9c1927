// Internal to the optimizers: the float32 update loops (SGD, Adam) and the
// sum of squares of clip_grad_norm, one copy per kernel path.
//
// update_kernels() gives the table of cohort::kernel_path() (cohort/base/cpu.h):
// on the baseline path the plain reference loops below (the tests' oracle),
// on avx2 / avx512 the same loops compiled for that ISA (update_kernels_isa.cc),
// where the compiler vectorizes them and contracts a*b+c into FMA, so their
// results may differ from the baseline in the last bit (NaN and inf propagate
// the same way). Each entry works on one contiguous chunk [0, n); the caller
// splits a tensor over threads (cohort::parallel_for). float64 parameters
// always use the reference loops. Pure functions; thread safe.
#pragma once

#include <cstdint>

namespace cohort::optim {

// One SGD step (sgd.h), its options already in the parameter's type.
template <typename T>
struct SgdCoeffs {
  T lr, momentum, damp1, weight_decay, sign;  // damp1 = 1 - dampening; sign = -1 maximizes
  bool has_weight_decay, has_momentum, first, nesterov;  // first: buf = d (no history)
};

// One Adam / AdamW step (adam.h): bias corrections and options in the
// parameter's type. decay: 0 none, 1 L2 (Adam), 2 decoupled (AdamW).
template <typename T>
struct AdamCoeffs {
  T sign, weight_decay, decay_factor, beta1, beta2, one_beta1, one_beta2, bc2_sqrt, eps,
      neg_step_size;
  int decay;
};

struct UpdateKernels {
  // p, g, buf: n elements; buf is null when !c.has_momentum.
  void (*sgd)(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c);
  // vmax is null unless amsgrad.
  void (*adam)(float* p, const float* g, float* m, float* v, float* vmax, int64_t n,
               const AdamCoeffs<float>& c);
  // Sum of x[i]^2 in double (clip_grad_norm's 2-norm).
  double (*sum_squares)(const float* x, int64_t n);
};

// The table of the kernel path in use.
const UpdateKernels& update_kernels();

// The plain loops: the baseline path, the float64 path and the oracle.
void sgd_reference(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs<float>& c);
void sgd_reference(double* p, const double* g, double* buf, int64_t n, const SgdCoeffs<double>& c);
void adam_reference(float* p, const float* g, float* m, float* v, float* vmax, int64_t n,
                    const AdamCoeffs<float>& c);
void adam_reference(double* p, const double* g, double* m, double* v, double* vmax, int64_t n,
                    const AdamCoeffs<double>& c);
double sum_squares_reference(const float* x, int64_t n);
double sum_squares_reference(const double* x, int64_t n);

}  // namespace cohort::optim
