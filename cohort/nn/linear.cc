#include "cohort/nn/linear.h"

#include <cmath>

#include "cohort/nn/init.h"

namespace cohort::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias)
    : Cloneable("Linear"), in_features_(in_features), out_features_(out_features), has_bias_(bias) {
  COHORT_CHECK(in_features > 0 && out_features > 0,
               "Linear: in_features and out_features must be positive, got {} and {}", in_features,
               out_features);
  Tensor w = Tensor::empty({out_features, in_features});
  init::kaiming_uniform_(w, std::sqrt(5.0), gen);
  register_parameter("weight", w);
  if (bias) {
    Tensor b = Tensor::empty({out_features});
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(b, -bound, bound, gen);
    register_parameter("bias", b);
  }
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features_, out_features_,
                     has_bias_ ? "True" : "False");
}

Tensor Linear::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() >= 1 && x.size(-1) == in_features_, "{}: input must be [..., {}], got {}",
               describe(), in_features_, shape_str(x.sizes()));
  return linear(x, weight(), bias());
}

}  // namespace cohort::nn
