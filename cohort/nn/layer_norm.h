// nn::LayerNorm, as torch.nn.LayerNorm: normalises over the trailing dims
// given by normalized_shape, then scales and shifts elementwise.
// x [..., *normalized_shape] -> same shape. weight (ones) and bias (zeros) of
// normalized_shape when elementwise_affine. Thread safety: see module.h.
#pragma once

#include "cohort/nn/module.h"

namespace cohort::nn {

class LayerNorm : public Cloneable<LayerNorm> {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine) {}

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  bool elementwise_affine() const { return affine_; }
  // normalized_shape, by reference (as Linear's); undefined without
  // elementwise_affine (the non-const forms then return handles owned by this
  // module, reset to undefined on every call: assigning to them adds nothing).
  const Tensor& weight() const {
    static const Tensor none;
    return affine_ ? param(0) : none;
  }
  Tensor& weight() { return affine_ ? param(0) : (no_param_ = Tensor()); }
  const Tensor& bias() const {
    static const Tensor none;
    return affine_ ? param(1) : none;
  }
  Tensor& bias() { return affine_ ? param(1) : (no_param_ = Tensor()); }

 private:
  Tensor no_param_;  // always undefined
  Shape normalized_shape_;
  double eps_;
  bool affine_;
};

}  // namespace cohort::nn
