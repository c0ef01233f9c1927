#include "cohort/nn/dropout.h"

namespace cohort::nn {

Tensor Dropout::forward(const Tensor& x) {
  COHORT_CHECK(is_floating(x.dtype()), "{}: input must be floating, got {}", describe(),
               dtype_name(x.dtype()));
  return dropout(x, p_, is_training(), *gen_);
}

Tensor Dropout2d::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 3 || x.dim() == 4, "{}: input must be [N, C, H, W] or [C, H, W], got {}",
               describe(), shape_str(x.sizes()));
  return dropout2d(x, p_, is_training(), *gen_);
}

}  // namespace cohort::nn
