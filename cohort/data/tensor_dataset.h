// TensorDataset: examples are rows (dim 0) of an input and a target tensor,
// as torch.utils.data.TensorDataset(inputs, targets). The tensors are copied
// to contiguous storage at construction (no aliasing with the caller's
// tensors afterwards). Immutable; thread safe.
#pragma once

#include "cohort/data/dataset.h"

namespace cohort::data {

class TensorDataset : public Dataset {
 public:
  // inputs [N, ...], targets [N, ...]; throws InvalidArgument when the first
  // dims differ or a tensor is 0-d.
  TensorDataset(const Tensor& inputs, const Tensor& targets);

  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace cohort::data
