#include "cohort/core/native/fused_optim.h"

#include <algorithm>
#include <cmath>

#include "cohort/core/dispatch.h"

namespace cohort::native {

DeviceOp<void(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
              const std::vector<uint8_t>&, const SgdStep&)>
    sgd_step_device("sgd_step");
DeviceOp<void(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
              const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<double>&,
              const AdamStep&)>
    adam_step_device("adam_step");
DeviceOp<Tensor(const std::vector<Tensor>&, double)> total_norm_device("total_norm");
DeviceOp<void(const std::vector<Tensor>&, const Tensor&, double)> scale_by_norm_device(
    "scale_by_norm");

Device check_fused_lists(const char* op, const std::vector<Tensor>& params,
                         const std::vector<const std::vector<Tensor>*>& lists) {
  Device device = params.empty() ? kCPU : params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    op_device(op, {&params[0], &p});
    COHORT_CHECK(is_floating(p.dtype()) && p.dtype() == params[0].dtype(),
                 "{}: tensor {} has dtype {}, tensor 0 {} (one floating dtype)", op, i,
                 dtype_name(p.dtype()), dtype_name(params[0].dtype()));
    COHORT_CHECK(p.is_contiguous(), "{}: tensor {} of shape {} is not contiguous", op, i,
                 shape_str(p.sizes()));
  }
  for (size_t l = 0; l < lists.size(); ++l) {
    const std::vector<Tensor>& list = *lists[l];
    COHORT_CHECK(list.size() == params.size(), "{}: list {} has {} tensors for {} parameters", op,
                 l + 1, list.size(), params.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const Tensor& t = list[i];
      op_device(op, {&params[i], &t});
      COHORT_CHECK(
          t.sizes() == params[i].sizes() && t.dtype() == params[i].dtype() && t.is_contiguous(),
          "{}: tensor {} of list {} ({} {}) must be a contiguous {} {} like its parameter", op, i,
          l + 1, shape_str(t.sizes()), dtype_name(t.dtype()), dtype_name(params[i].dtype()),
          shape_str(params[i].sizes()));
    }
  }
  return device;
}

void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& bufs, const std::vector<uint8_t>& first,
              const SgdStep& s) {
  const bool momentum = s.momentum != 0;
  std::vector<const std::vector<Tensor>*> lists{&grads};
  if (momentum) lists.push_back(&bufs);
  Device d = check_fused_lists("sgd_step", params, lists);
  COHORT_CHECK(!momentum || first.size() == params.size(),
               "sgd_step: {} first-step flags for {} parameters", first.size(), params.size());
  if (!d.is_cpu()) return sgd_step_device(d, params, grads, bufs, first, s);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].storage()->bump_version();
    if (momentum) bufs[i].storage()->bump_version();
    dispatch_floating(params[i].dtype(), "sgd_step", [&](auto tag) {
      using T = decltype(tag);
      T* p = params[i].data_ptr<T>();
      const T* g = grads[i].data_ptr<T>();
      T* buf = momentum ? bufs[i].data_ptr<T>() : nullptr;
      const T lr = static_cast<T>(s.lr), mom = static_cast<T>(s.momentum),
              damp1 = static_cast<T>(1.0 - s.dampening), wd = static_cast<T>(s.weight_decay),
              sign = s.maximize ? T(-1) : T(1);
      const bool fresh = momentum && first[i] != 0;
      for (int64_t k = 0; k < params[i].numel(); ++k) {
        T dk = sign * g[k];
        if (s.weight_decay != 0) dk = dk + wd * p[k];
        if (momentum) {
          const T m = fresh ? dk : buf[k] * mom + damp1 * dk;
          buf[k] = m;
          dk = s.nesterov ? dk + mom * m : m;
        }
        p[k] = p[k] - lr * dk;
      }
    });
  }
}

void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
               const std::vector<Tensor>& max_exp_avg_sq, const std::vector<double>& steps,
               const AdamStep& s) {
  std::vector<const std::vector<Tensor>*> lists{&grads, &exp_avg, &exp_avg_sq};
  if (s.amsgrad) lists.push_back(&max_exp_avg_sq);
  Device d = check_fused_lists("adam_step", params, lists);
  COHORT_CHECK(steps.size() == params.size(), "adam_step: {} step counts for {} parameters",
               steps.size(), params.size());
  if (!d.is_cpu())
    return adam_step_device(d, params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq, steps, s);
  const int decay = s.weight_decay == 0 ? 0 : s.decoupled ? 2 : 1;
  for (size_t i = 0; i < params.size(); ++i) {
    for (const auto* l : lists)
      if (l != &grads) (*l)[i].storage()->bump_version();
    params[i].storage()->bump_version();
    dispatch_floating(params[i].dtype(), "adam_step", [&](auto tag) {
      using T = decltype(tag);
      const double bc1 = 1.0 - std::pow(s.beta1, steps[i]);
      const double bc2 = 1.0 - std::pow(s.beta2, steps[i]);
      const T sign = s.maximize ? T(-1) : T(1), wd = static_cast<T>(s.weight_decay),
              decay_factor = static_cast<T>(1.0 - s.lr * s.weight_decay),
              beta1 = static_cast<T>(s.beta1), beta2 = static_cast<T>(s.beta2),
              one_beta1 = static_cast<T>(1.0 - s.beta1), one_beta2 = static_cast<T>(1.0 - s.beta2),
              bc2_sqrt = static_cast<T>(std::sqrt(bc2)), eps = static_cast<T>(s.eps),
              neg_step = static_cast<T>(-(s.lr / bc1));
      T* p = params[i].data_ptr<T>();
      const T* g = grads[i].data_ptr<T>();
      T* m = exp_avg[i].data_ptr<T>();
      T* v = exp_avg_sq[i].data_ptr<T>();
      T* vmax = s.amsgrad ? max_exp_avg_sq[i].data_ptr<T>() : nullptr;
      for (int64_t k = 0; k < params[i].numel(); ++k) {
        T pk = p[k];
        T gk = sign * g[k];
        if (decay == 1) gk = gk + wd * pk;
        if (decay == 2) pk = pk * decay_factor;
        const T mk = m[k] * beta1 + one_beta1 * gk;
        T vk = v[k] * beta2 + one_beta2 * (gk * gk);
        m[k] = mk;
        v[k] = vk;
        if (vmax != nullptr) {
          vk = std::max(vmax[k], vk);
          vmax[k] = vk;
        }
        const T denom = std::sqrt(vk) / bc2_sqrt + eps;
        p[k] = pk + neg_step * (mk / denom);
      }
    });
  }
}

Tensor total_norm(const std::vector<Tensor>& tensors, double p) {
  COHORT_CHECK(p > 0, "total_norm: the order must be positive or inf, got {}", p);
  Device d = check_fused_lists("total_norm", tensors, {});
  if (!d.is_cpu()) return total_norm_device(d, tensors, p);
  const bool inf = std::isinf(p);
  double total = 0;
  for (const Tensor& t : tensors) {
    dispatch_floating(t.dtype(), "total_norm", [&](auto tag) {
      using T = decltype(tag);
      const T* x = t.data_ptr<T>();
      for (int64_t k = 0; k < t.numel(); ++k) {
        const double a = std::abs(static_cast<double>(x[k]));
        if (inf)
          total = std::isnan(a) || std::isnan(total) ? std::nan("") : std::max(total, a);
        else
          total += p == 2.0 ? a * a : p == 1.0 ? a : std::pow(a, p);
      }
    });
  }
  if (!inf) total = p == 2.0 ? std::sqrt(total) : p == 1.0 ? total : std::pow(total, 1.0 / p);
  return Tensor::scalar(total, DType::kFloat64);
}

void scale_by_norm(const std::vector<Tensor>& tensors, const Tensor& norm, double max_norm) {
  Device d = check_fused_lists("scale_by_norm", tensors, {});
  if (tensors.empty()) return;
  COHORT_CHECK(norm.numel() == 1, "scale_by_norm: the norm must have one element, got {}",
               shape_str(norm.sizes()));
  if (!d.is_cpu() || !norm.is_cpu()) {
    op_device("scale_by_norm", {&tensors[0], &norm});
    return scale_by_norm_device(d, tensors, norm, max_norm);
  }
  const double coef = max_norm / (norm.item<double>() + 1e-6);
  if (coef >= 1.0) return;
  for (const Tensor& t : tensors) Tensor(t).mul_(coef);
}

}  // namespace cohort::native
