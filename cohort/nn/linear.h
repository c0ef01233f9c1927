// nn::Linear: y = x W^T + b, as torch.nn.Linear.
// x [..., in_features] -> y [..., out_features]; weight [out, in], bias [out].
// Initialisation (PyTorch's): weight and bias U(-1/sqrt(in), 1/sqrt(in)),
// drawn from gen in that order. Thread safety: see module.h.
#pragma once

#include "cohort/core/random.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

class Linear : public Cloneable<Linear> {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  const Tensor& weight() const { return param(0); }
  Tensor& weight() { return param(0); }
  bool has_bias() const { return has_bias_; }
  // [out_features], by reference like weight() (so init::constant_(l.bias(),
  // 0) works). With bias = false, an undefined tensor (LibTorch's contract):
  // the non-const form then returns a handle owned by this module that is
  // reset to undefined on every call, so assigning to it adds no bias.
  const Tensor& bias() const {
    static const Tensor none;
    return has_bias_ ? param(1) : none;
  }
  Tensor& bias() { return has_bias_ ? param(1) : (no_bias_ = Tensor()); }

 private:
  Tensor no_bias_;  // always undefined
  int64_t in_features_;
  int64_t out_features_;
  bool has_bias_;
};

}  // namespace cohort::nn
