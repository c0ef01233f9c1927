#include "cohort/nn/dropout.h"

namespace cohort::nn {

Dropout::Dropout(double p, Generator& gen)
    : Cloneable("Dropout"), p_(p), gen_(std::make_shared<Generator>(gen.next_u64())) {
  COHORT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  COHORT_CHECK(is_floating(x.dtype()), "{}: input must be floating, got {}", describe(),
               dtype_name(x.dtype()));
  return dropout(x, p_, is_training(), *gen_);
}

void Dropout::on_copy(bool deep) {
  if (deep) gen_ = std::make_shared<Generator>(*gen_);
}

Dropout2d::Dropout2d(double p, Generator& gen)
    : Cloneable("Dropout2d"), p_(p), gen_(std::make_shared<Generator>(gen.next_u64())) {
  COHORT_CHECK(p >= 0.0 && p <= 1.0, "Dropout2d: p must be in [0, 1], got {}", p);
}

Tensor Dropout2d::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 3 || x.dim() == 4, "{}: input must be [N, C, H, W] or [C, H, W], got {}",
               describe(), shape_str(x.sizes()));
  return dropout2d(x, p_, is_training(), *gen_);
}

void Dropout2d::on_copy(bool deep) {
  if (deep) gen_ = std::make_shared<Generator>(*gen_);
}

}  // namespace cohort::nn
