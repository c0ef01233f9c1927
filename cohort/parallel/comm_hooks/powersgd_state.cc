#include <cmath>

#include "cohort/base/error.h"
#include "cohort/parallel/comm_hooks/powersgd_hook.h"

namespace cohort::parallel {

namespace {

template <typename T>
void gram_schmidt(T* a, int64_t n, int64_t r, double epsilon) {
  // Row-major [n, r]: column i is a[k * r + i]. The columns are few (the
  // rank), so the strided walk costs nothing next to the matmuls.
  for (int64_t i = 0; i < r; ++i) {
    double norm2 = 0;
    for (int64_t k = 0; k < n; ++k) norm2 += static_cast<double>(a[k * r + i]) * a[k * r + i];
    const double denom = std::sqrt(norm2) + epsilon;
    // PyTorch turns the NaNs of 0 / 0 back into zeros; never make them.
    const double inv = denom == 0 ? 0.0 : 1.0 / denom;
    for (int64_t k = 0; k < n; ++k) a[k * r + i] = static_cast<T>(a[k * r + i] * inv);
    for (int64_t j = i + 1; j < r; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(a[k * r + i]) * a[k * r + j];
      for (int64_t k = 0; k < n; ++k)
        a[k * r + j] = static_cast<T>(a[k * r + j] - dot * a[k * r + i]);
    }
  }
}

}  // namespace

void orthogonalize(Tensor& m, double epsilon) {
  COHORT_CHECK(m.dim() == 2 && m.is_contiguous() && m.device().is_cpu(),
               "orthogonalize: needs a contiguous [n, r] CPU tensor, got {}-d", m.dim());
  if (m.dtype() == DType::kFloat32) {
    gram_schmidt(m.data_ptr<float>(), m.size(0), m.size(1), epsilon);
  } else if (m.dtype() == DType::kFloat64) {
    gram_schmidt(m.data_ptr<double>(), m.size(0), m.size(1), epsilon);
  } else {
    throw NotSupported(
        fmt::format("orthogonalize: float32 or float64 only, not {}", dtype_name(m.dtype())));
  }
}

PowerSGDState::PowerSGDState(PowerSGDOptions options)
    : options_(options), rng_(options.random_seed) {
  COHORT_CHECK(options_.matrix_approximation_rank >= 1,
               "PowerSGD: matrix_approximation_rank must be >= 1, got {}",
               options_.matrix_approximation_rank);
  COHORT_CHECK(options_.min_compression_rate >= 0,
               "PowerSGD: min_compression_rate must be >= 0, got {}",
               options_.min_compression_rate);
  COHORT_CHECK(options_.orthogonalization_epsilon >= 0,
               "PowerSGD: orthogonalization_epsilon must be >= 0, got {}",
               options_.orthogonalization_epsilon);
  // PyTorch's rule (there because its DDP rebuilds the buckets after the
  // first iteration, which would invalidate the per-bucket state); kept so
  // that a configuration means the same in both.
  COHORT_CHECK(
      !(options_.use_error_feedback || options_.warm_start) || options_.start_powerSGD_iter > 1,
      "PowerSGD: start_powerSGD_iter must be > 1 when use_error_feedback or warm_start "
      "is on (as PyTorch's PowerSGDState), got {}",
      options_.start_powerSGD_iter);
}

}  // namespace cohort::parallel
