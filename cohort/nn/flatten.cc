#include "cohort/nn/flatten.h"

namespace cohort::nn {

Tensor Flatten::forward(const Tensor& x) {
  int64_t n = std::max<int64_t>(x.dim(), 1);
  auto ok = [&](int64_t d) { return d >= -n && d < n; };
  COHORT_CHECK(ok(start_dim_) && ok(end_dim_), "{}: dims out of range for input {}", describe(),
               shape_str(x.sizes()));
  return flatten(x, start_dim_, end_dim_);
}

}  // namespace cohort::nn
