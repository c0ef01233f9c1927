// The reference loops of transformer_rows.h (scalar, in double) and the
// choice of the table per kernel path.
#include "cohort/core/kernels/transformer_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cohort/base/cpu.h"
#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"

namespace cohort::kernels::detail {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCoeff = 0.044715;
}  // namespace

double gelu_tanh_value(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
}

// PyTorch's GeluBackward (approximate="tanh") formula.
double gelu_tanh_derivative(double x) {
  const double inner = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  const double t = std::tanh(inner);
  const double d_inner = kSqrt2OverPi * (1.0 + 3.0 * kGeluCoeff * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner;
}

int64_t row_parts(int64_t rows, int64_t min_rows) {
  return std::max<int64_t>(1,
                           std::min<int64_t>(num_threads(), rows / std::max<int64_t>(min_rows, 1)));
}

void for_row_parts(int64_t rows, int64_t parts,
                   const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (rows <= 0) return;
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) fn(p, rows * p / parts, rows * (p + 1) / parts);
  });
}

ColumnSums::ColumnSums(int64_t parts, int64_t n)
    : parts_(parts), n_(n), block_(parts * n, 0.0f), sums_(parts * n, 0.0) {}

void ColumnSums::flush(int64_t part) {
  float* b = block(part);
  double* s = sums_.data() + part * n_;
  for (int64_t i = 0; i < n_; ++i) {
    s[i] += b[i];
    b[i] = 0.0f;
  }
}

Tensor ColumnSums::result(const Shape& shape) const {
  std::vector<double> total(n_, 0.0);
  for (int64_t p = 0; p < parts_; ++p)
    for (int64_t i = 0; i < n_; ++i) total[i] += sums_[p * n_ + i];
  return Tensor::from_vector(total, shape).to(DType::kFloat32);
}

namespace {

void gelu_tanh(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(gelu_tanh_value(x[i]));
}

void gelu_tanh_backward(const float* g, const float* x, float* dx, float* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = static_cast<float>(g[i] * gelu_tanh_derivative(x[i]));
    if (db) db[i] += dx[i];
  }
}

void bias_gelu_tanh(float* h, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (b) h[i] += b[i];
    y[i] = static_cast<float>(gelu_tanh_value(h[i]));
  }
}

void layer_norm(const float* x, const float* delta, float* s_out, const float* w, const float* b,
                float* y, int64_t n, double eps, double* mean_out, double* rstd_out) {
  auto s = [&](int64_t i) { return delta ? x[i] + delta[i] : x[i]; };  // float, as x + delta
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += s(i);
  const double mean = sum / n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (s(i) - mean) * (s(i) - mean);
  const double rstd = 1.0 / std::sqrt(var / n + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float si = s(i);
    if (s_out) s_out[i] = si;
    double v = (si - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = static_cast<float>(v);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

void layer_norm_backward(const float* g, const float* x, const float* w, double mean, double rstd,
                         float* dx, float* dw, float* db, int64_t n) {
  double sum_gw = 0, sum_gw_xhat = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xhat = (x[i] - mean) * rstd;
    const double gw = w ? static_cast<double>(g[i]) * w[i] : g[i];
    sum_gw += gw;
    sum_gw_xhat += gw * xhat;
    if (dw) dw[i] += static_cast<float>(g[i] * xhat);
    if (db) db[i] += g[i];
  }
  if (!dx) return;
  for (int64_t i = 0; i < n; ++i) {
    const double xhat = (x[i] - mean) * rstd;
    const double gw = w ? static_cast<double>(g[i]) * w[i] : g[i];
    dx[i] = static_cast<float>(rstd * (gw - sum_gw / n - xhat * sum_gw_xhat / n));
  }
}

float log_sum_exp(const float* x, int64_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    mx = x[i] > mx ? x[i] : mx;
  }
  if (std::isinf(mx)) return static_cast<float>(mx);  // +inf, or every entry -inf
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return static_cast<float>(mx + std::log(s));
}

void softmax_scaled(const float* x, float lse, float scale, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - lse) * scale);
}

void add_to(const float* x, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

constexpr TransformerRows kReference{
    &gelu_tanh,           &gelu_tanh_backward, &bias_gelu_tanh, &layer_norm,
    &layer_norm_backward, &log_sum_exp,        &softmax_scaled, &add_to};

}  // namespace

COHORT_ISA_DECLARE_TABLE(TransformerRows, kTransformerRows)

const TransformerRows& transformer_rows() {
  return *COHORT_ISA_TABLE(TransformerRows, &kReference, kTransformerRows);
}

const TransformerRows& transformer_rows_reference() { return kReference; }

}  // namespace cohort::kernels::detail
