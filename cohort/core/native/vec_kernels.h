// Internal to the native kernels: the contiguous float32 loops of the
// elementwise ops and of sum / mean, one copy per fast kernel path.
//
// vec_kernels() gives the copy of cohort::kernel_path() (cohort/base/cpu.h),
// compiled for that ISA (vec_kernels_isa.cc: the plain loops, vectorized by
// the compiler), or null on the baseline path, where elementwise.cc and
// reduce.cc run their own generic loops -- the reference these copies are
// tested against. The elementwise loops give the reference's values bit for
// bit (no operation in them can be contracted or reordered); row_sum adds in
// another order than the baseline's, in double, so its float result may
// differ by the double rounding only. Pure functions; thread safe.
#pragma once

#include <cstdint>

namespace cohort::native {

// The BinaryOps (elementwise.h) with a vector loop, in that enum's order.
inline constexpr int kVecBinaryOps = 6;  // add, sub, mul, div, maximum, minimum
// Operand forms: both vectors; b a scalar (b[0]); a a scalar (a[0]).
enum class VecForm { kVectors = 0, kScalarB = 1, kScalarA = 2 };

struct VecKernels {
  // out[i] = a[i] op b[i] for i < n (a or b read at [0] by the scalar forms);
  // NaN propagates from either side, as in the reference, maximum/minimum
  // included. out may not overlap a or b.
  using Binary = void (*)(const float* a, const float* b, float* out, int64_t n);
  Binary binary[kVecBinaryOps][3];  // [BinaryOp][VecForm]
  void (*neg)(const float* x, float* out, int64_t n);
  void (*abs)(const float* x, float* out, int64_t n);
  void (*relu)(const float* x, float* out, int64_t n);  // x > 0 ? x : 0 (NaN -> 0)
  // r[i] = out[i] > 0 ? grad[i] : 0 (ReLU's threshold backward).
  void (*relu_backward)(const float* grad, const float* out, float* r, int64_t n);
  // Sum of x[0..n) in double.
  double (*row_sum)(const float* x, int64_t n);
  // acc[j] += row[j] for j < n (the column sums of a row-major matrix, row by
  // row: each column in row order, bit-identical to the reference).
  void (*add_row)(const float* row, double* acc, int64_t n);
};

// The copy of the kernel path in use; null on the baseline path.
const VecKernels* vec_kernels();

}  // namespace cohort::native
