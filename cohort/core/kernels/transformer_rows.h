// Internal to the transformer kernels (gelu.h, layer_norm.h, cross_entropy.h):
// the float32 loops over one contiguous row, one copy per kernel path.
//
// transformer_rows() gives the table of cohort::kernel_path() (cohort/base/cpu.h):
// on the baseline path the reference loops below (plain scalar code in double,
// the formulas as PyTorch writes them: the tests' oracle), on avx2 / avx512
// the vector copies of transformer_rows_isa.cc. Those compute in float with
// several vector accumulators and a polynomial exp (Cephes' expf, within 2 ulp
// over its range), so their results differ from the reference by float
// rounding: about 1e-6 relative for GELU, LayerNorm and log-sum-exp. NaN
// propagates through every entry as in the reference. Each entry works on one
// row; callers split rows over threads (cohort::parallel_for). Pure functions;
// thread safe. Pointers marked "or null" may be null; outputs never alias
// inputs unless said.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::kernels::detail {

struct TransformerRows {
  // y[i] = gelu_tanh(x[i]) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  void (*gelu_tanh)(const float* x, float* y, int64_t n);
  // dx[i] = g[i] * gelu_tanh'(x[i]); db (or null): db[i] += dx[i].
  void (*gelu_tanh_backward)(const float* g, const float* x, float* dx, float* db, int64_t n);
  // The epilogue of a linear layer: h[i] += b[i] (b or null), then
  // y[i] = gelu_tanh(h[i]); h keeps the pre-activation.
  void (*bias_gelu_tanh)(float* h, const float* b, float* y, int64_t n);
  // LayerNorm of one row of n. With delta (or null): s = x + delta, stored in
  // s_out (or null), and s normalised; else x is. y = (s - mean) rstd w + b
  // (w, b or null); mean and rstd = 1/sqrt(biased var + eps) of the row.
  void (*layer_norm)(const float* x, const float* delta, float* s_out, const float* w,
                     const float* b, float* y, int64_t n, double eps, double* mean, double* rstd);
  // The backward of one row, x the normalised input, g the output gradient:
  // dx (or null) = rstd (gw - mean(gw) - xhat mean(gw xhat)) with gw = g w;
  // dw (or null): dw[i] += g[i] xhat[i]; db (or null): db[i] += g[i].
  void (*layer_norm_backward)(const float* g, const float* x, const float* w, double mean,
                              double rstd, float* dx, float* dw, float* db, int64_t n);
  // log(sum exp(x[i])) over n >= 1, with a running maximum (vocabulary
  // chunks, never overflowing); +inf entries give +inf, all -inf give -inf.
  float (*log_sum_exp)(const float* x, int64_t n);
  // dx[i] = exp(x[i] - lse) * scale (the softmax, scaled: cross-entropy's
  // gradient before its one-hot term).
  void (*softmax_scaled)(const float* x, float lse, float scale, float* dx, int64_t n);
  // acc[i] += x[i] in float (a row into column sums: the same bits on every
  // path).
  void (*add_to)(const float* x, float* acc, int64_t n);
};

// The table of the kernel path in use (the reference table on the baseline).
const TransformerRows& transformer_rows();
// The reference loops, whatever the path (tests compare against it).
const TransformerRows& transformer_rows_reference();

// The reference formulas (PyTorch's, in double) for the float64 kernels.
double gelu_tanh_value(double x);
double gelu_tanh_derivative(double x);

// How many parts to cut `rows` rows into: at most cohort::num_threads(), of
// at least min_rows rows each, at least 1.
int64_t row_parts(int64_t rows, int64_t min_rows);
// Calls fn(part, r0, r1) for rows [0, rows) cut into `parts` contiguous
// parts, over parallel_for (one part per chunk when the budget allows).
void for_row_parts(int64_t rows, int64_t parts,
                   const std::function<void(int64_t part, int64_t r0, int64_t r1)>& fn);

// Column sums over the rows of several parts (a bias or LayerNorm weight
// gradient): each part adds rows into a float block, which flush() adds into
// the part's double sums (call it at least every kFlushRows rows, so that no
// float sum runs long); result() adds the parts in order.
class ColumnSums {
 public:
  static constexpr int64_t kFlushRows = 64;
  ColumnSums(int64_t parts, int64_t n);
  float* block(int64_t part) { return block_.data() + part * n_; }
  void flush(int64_t part);
  // The sums as a float32 tensor of `shape` (n elements).
  Tensor result(const Shape& shape) const;

 private:
  int64_t parts_, n_;
  std::vector<float> block_;
  std::vector<double> sums_;
};

}  // namespace cohort::kernels::detail
