#include "cohort/data/tensor_dataset.h"

namespace cohort::data {

TensorDataset::TensorDataset(const Tensor& inputs, const Tensor& targets) {
  COHORT_CHECK(inputs.defined() && targets.defined() && inputs.dim() >= 1 && targets.dim() >= 1,
               "TensorDataset: inputs and targets must be tensors with a dim 0");
  COHORT_CHECK(inputs.size(0) == targets.size(0),
               "TensorDataset: inputs {} and targets {} differ in dim 0", shape_str(inputs.sizes()),
               shape_str(targets.sizes()));
  inputs_ = inputs.detach().clone();
  targets_ = targets.detach().clone();
}

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset::get", index, size());
  return Example{inputs_.select(0, index).clone(), targets_.select(0, index).clone()};
}

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  COHORT_CHECK(!indices.empty(), "TensorDataset::get_batch: empty index list");
  return Batch{gather_rows(inputs_, indices, "TensorDataset::get_batch"),
               gather_rows(targets_, indices, "TensorDataset::get_batch")};
}

}  // namespace cohort::data
