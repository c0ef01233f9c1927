// optim::SGD, with PyTorch's exact update rule (torch.optim.SGD, 1.13):
//   g = grad (negated when maximize);  g += weight_decay * p
//   if momentum != 0:
//     buf = g on the first step, else buf = momentum * buf + (1 - dampening) * g
//     g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// Options (group option names in quotes): lr "lr", momentum "momentum",
// dampening "dampening", weight_decay "weight_decay", nesterov "nesterov" (0/1),
// maximize "maximize" (0/1). State per parameter: "momentum_buffer".
// Thread safety and state dicts: see optimizer.h.
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/optim/optimizer.h"

namespace cohort::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
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
  void add_param_group(std::vector<Tensor> params, const SGDOptions& options);

 protected:
  std::vector<std::string> state_keys(const ParamGroup& group) const override;
  void check_options(const Options& options) const override;
};

}  // namespace cohort::optim
