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

}  // namespace cohort::nn
