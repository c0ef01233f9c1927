#include "cohort/nn/activation.h"

namespace cohort::nn {

namespace {
void check_dim(const Module& m, const Tensor& x, int64_t dim) {
  COHORT_CHECK(dim >= -x.dim() && dim < x.dim() && x.dim() > 0,
               "{}: dim {} is out of range for input {}", m.describe(), dim, shape_str(x.sizes()));
}
}  // namespace

Tensor Softmax::forward(const Tensor& x) {
  check_dim(*this, x, dim_);
  return softmax(x, dim_);
}

Tensor LogSoftmax::forward(const Tensor& x) {
  check_dim(*this, x, dim_);
  return log_softmax(x, dim_);
}

}  // namespace cohort::nn
