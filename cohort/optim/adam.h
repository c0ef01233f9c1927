// optim::Adam and optim::AdamW with PyTorch 1.13's formulas
// (torch.optim.Adam / AdamW, single-tensor path):
//   step += 1;  g = grad (negated when maximize)
//   Adam:  g += weight_decay * p          AdamW: p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p -= lr / (1 - beta1^step) * m / (sqrt(v_hat) / sqrt(1 - beta2^step) + eps)
// Options: "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad" (0/1),
// "maximize" (0/1). State per parameter: "step" (0-d float32, as PyTorch
// keeps it), "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad only).
// Thread safety and state dicts: see optimizer.h.
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/optim/optimizer.h"

namespace cohort::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  void step() override;

  // The string form (Optimizer::add_param_group), still accepted. A template
  // only so that a braced list of designated fields picks the typed form
  // below (GCC 12 otherwise calls {.lr = x} ambiguous between the two).
  template <typename = void>
  void add_param_group(std::vector<Tensor> params,
                       const std::type_identity_t<Options>& overrides = {}) {
    Optimizer::add_param_group(std::move(params), overrides);
  }
  // A group with its own options, every field of `options` (typed: see optimizer.h).
  void add_param_group(std::vector<Tensor> params, const AdamOptions& options);

 protected:
  Adam(std::string name, std::vector<Tensor> params, const AdamOptions& options, bool decoupled);
  std::vector<std::string> state_keys(const ParamGroup& group) const override;
  void check_options(const Options& options) const override;

 private:
  bool decoupled_;  // AdamW's weight decay
};

// AdamW: Adam with decoupled weight decay (default 1e-2, as PyTorch).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});

  // The string form (Optimizer::add_param_group), still accepted. A template
  // only so that a braced list of designated fields picks the typed form
  // below (GCC 12 otherwise calls {.lr = x} ambiguous between the two).
  template <typename = void>
  void add_param_group(std::vector<Tensor> params,
                       const std::type_identity_t<Options>& overrides = {}) {
    Optimizer::add_param_group(std::move(params), overrides);
  }
  // A group with its own options, every field of `options` (typed: see
  // optimizer.h); hides Adam's form, whose struct has Adam's defaults.
  void add_param_group(std::vector<Tensor> params, const AdamWOptions& options);
};

}  // namespace cohort::optim
