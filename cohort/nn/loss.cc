#include "cohort/nn/loss.h"

namespace cohort::nn {

namespace {

void check_class_input(const Module& m, const Tensor& input, const Tensor& target) {
  COHORT_CHECK(input.dim() == 2, "{}: input must be [N, C], got {}", m.describe(),
               shape_str(input.sizes()));
  COHORT_CHECK(target.dtype() == kInt64, "{}: target must be int64 class indices, got {}",
               m.describe(), dtype_name(target.dtype()));
  COHORT_CHECK(target.dim() == 1 && target.size(0) == input.size(0),
               "{}: target must be [{}] for input {}, got {}", m.describe(), input.size(0),
               shape_str(input.sizes()), shape_str(target.sizes()));
}

}  // namespace

std::string reduction_name(Reduction r) {
  switch (r) {
    case Reduction::kNone:
      return "none";
    case Reduction::kMean:
      return "mean";
    case Reduction::kSum:
      return "sum";
  }
  return "?";
}

std::string MSELoss::extra_repr() const { return "reduction=" + reduction_name(reduction_); }

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  COHORT_CHECK(input.sizes() == target.sizes(),
               "{}: input and target must have the same shape, got {} and {}", describe(),
               shape_str(input.sizes()), shape_str(target.sizes()));
  return mse_loss(input, target, reduction_);
}

std::string NLLLoss::extra_repr() const {
  return fmt::format("reduction={}, ignore_index={}", reduction_name(reduction_), ignore_index_);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  check_class_input(*this, input, target);
  return nll_loss(input, target, reduction_, ignore_index_);
}

std::string CrossEntropyLoss::extra_repr() const {
  return fmt::format("reduction={}, ignore_index={}", reduction_name(reduction_), ignore_index_);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  check_class_input(*this, input, target);
  return cross_entropy(input, target, reduction_, ignore_index_);
}

}  // namespace cohort::nn
