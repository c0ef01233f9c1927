#include "cohort/optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <type_traits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/fused_optim.h"
#include "cohort/optim/device_update.h"
#include "cohort/optim/update_kernels.h"
#include "cohort/optim/update_util.h"

namespace cohort::optim {

namespace {

// Sum of |x|^p (or max |x| for p = inf) over a contiguous buffer, in double.
template <typename T>
double accumulate(const T* x, int64_t n, double p) {
  std::mutex mu;
  double total = 0;
  const bool inf = std::isinf(p);
  parallel_for(0, n, kUpdateGrain, [&](int64_t b, int64_t e) {
    double acc = 0;
    if (inf) {
      for (int64_t i = b; i < e; ++i) acc = std::max(acc, static_cast<double>(std::abs(x[i])));
    } else if (p == 2.0) {
      // float32 through the kernel path's loop (update_kernels.h).
      if constexpr (std::is_same_v<T, float>)
        acc = update_kernels().sum_squares(x + b, e - b);
      else
        acc = sum_squares_reference(x + b, e - b);
    } else if (p == 1.0) {
      for (int64_t i = b; i < e; ++i) acc += std::abs(static_cast<double>(x[i]));
    } else {
      for (int64_t i = b; i < e; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
    }
    std::lock_guard<std::mutex> lock(mu);
    total = inf ? std::max(total, acc) : total + acc;
  });
  return total;
}

// The gradients when they are on a device (contiguous; empty when they are
// on the CPU, or there are none): their norm and clipping then run as fused
// kernels there (native/fused_optim.h).
std::vector<Tensor> device_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  bool on_device = false;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    on_device = on_device || !g.is_cpu();
    grads.push_back(g);
  }
  if (!on_device) return {};
  for (Tensor& g : grads) {
    COHORT_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64,
                 "clip_grad_norm: gradients must be float32 or float64, got {}",
                 dtype_name(g.dtype()));
    g = g.contiguous();
  }
  return grads;
}

// The gradients by device (in order of first appearance): a fused norm runs
// on one device; a model spread over several (ToyMpModel) combines theirs.
std::vector<std::vector<Tensor>> by_device(const std::vector<Tensor>& grads) {
  std::vector<std::vector<Tensor>> out;
  for (const std::vector<size_t>& group : indices_by_device(grads)) {
    std::vector<Tensor>& g = out.emplace_back();
    for (size_t i : group) g.push_back(grads[i]);
  }
  return out;
}

double combine_norms(const std::vector<std::vector<Tensor>>& groups, double norm_type) {
  const bool inf = std::isinf(norm_type);
  double total = 0;
  for (const auto& g : groups) {
    const double n = native::total_norm(g, norm_type).item<double>();
    total = inf ? std::max(total, n) : total + std::pow(n, norm_type);
  }
  return inf ? total : std::pow(total, 1.0 / norm_type);
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  COHORT_CHECK(norm_type > 0, "clip_grad_norm: norm_type must be positive or inf, got {}",
               norm_type);
  if (std::vector<Tensor> grads = device_grads(params); !grads.empty()) {
    auto groups = by_device(grads);
    if (groups.size() > 1) return combine_norms(groups, norm_type);
    return native::total_norm(grads, norm_type).item<double>();
  }
  const bool inf = std::isinf(norm_type);
  double total = 0;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    COHORT_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64,
                 "clip_grad_norm: gradients must be float32 or float64, got {}",
                 dtype_name(g.dtype()));
    Tensor c = g.contiguous();
    double part = c.dtype() == kFloat32 ? accumulate(c.data_ptr<float>(), c.numel(), norm_type)
                                        : accumulate(c.data_ptr<double>(), c.numel(), norm_type);
    total = inf ? std::max(total, part) : total + part;
  }
  if (inf) return total;
  return norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  COHORT_CHECK(norm_type > 0, "clip_grad_norm: norm_type must be positive or inf, got {}",
               norm_type);
  if (std::vector<Tensor> grads = device_grads(params); !grads.empty()) {
    // The norm and the scaling stay on the device; the host reads the one
    // scalar it returns (first, when it must refuse a non-finite norm).
    NoGradGuard no_grad;
    auto groups = by_device(grads);
    Tensor norm = native::total_norm(groups.front(), norm_type);
    double total = 0;
    if (groups.size() > 1) {
      // Several devices: the host combines their norms (one read each).
      total = combine_norms(groups, norm_type);
      norm.fill_(total);
    }
    if (error_if_nonfinite || groups.size() > 1) {
      if (groups.size() == 1) total = norm.item<double>();
      COHORT_CHECK(!error_if_nonfinite || std::isfinite(total),
                   "clip_grad_norm: the total norm of order {} of the gradients is non-finite "
                   "({}), so they cannot be clipped",
                   norm_type, total);
    }
    for (const auto& g : groups) native::scale_by_norm(g, norm.to(g.front().device()), max_norm);
    // Gradients that were not contiguous were scaled in a copy.
    size_t k = 0;
    for (const Tensor& p : params) {
      if (!p.defined() || !p.grad().defined()) continue;
      if (!grads[k].is_same(p.grad())) p.mutable_grad().copy_(grads[k]);
      ++k;
    }
    return error_if_nonfinite || groups.size() > 1 ? total : norm.item<double>();
  }
  double total = grad_norm(params, norm_type);
  COHORT_CHECK(!error_if_nonfinite || std::isfinite(total),
               "clip_grad_norm: the total norm of order {} of the gradients is non-finite ({}), "
               "so they cannot be clipped",
               norm_type, total);
  double coef = max_norm / (total + 1e-6);
  // As PyTorch: a NaN total poisons the gradients rather than passing silently.
  if (!(coef >= 1.0)) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      if (!p.defined() || !p.grad().defined()) continue;
      p.mutable_grad().mul_(coef);
    }
  }
  return total;
}

}  // namespace cohort::optim
