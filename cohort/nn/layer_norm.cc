#include "cohort/nn/layer_norm.h"

namespace cohort::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine)
    : Cloneable("LayerNorm"),
      normalized_shape_(std::move(normalized_shape)),
      eps_(eps),
      affine_(elementwise_affine) {
  COHORT_CHECK(!normalized_shape_.empty() && shape_numel(normalized_shape_) > 0,
               "LayerNorm: normalized_shape must be non-empty with positive sizes, got {}",
               shape_str(normalized_shape_));
  if (affine_) {
    register_parameter("weight", Tensor::ones(normalized_shape_));
    register_parameter("bias", Tensor::zeros(normalized_shape_));
  }
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (int64_t d : normalized_shape_) dims += fmt::format("{},", d);
  return fmt::format("({}), eps={}, elementwise_affine={}", dims, eps_, affine_ ? "True" : "False");
}

Tensor LayerNorm::forward(const Tensor& x) {
  int64_t k = static_cast<int64_t>(normalized_shape_.size());
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape_[i];
  COHORT_CHECK(ok, "{}: input must be [..., {}], got {}", describe(),
               shape_str(normalized_shape_).substr(1, shape_str(normalized_shape_).size() - 2),
               shape_str(x.sizes()));
  return layer_norm(x, normalized_shape_, weight(), bias(), eps_);
}

}  // namespace cohort::nn
