// ToyModel of the DDP tutorial: net1 Linear(10, 10) -> relu ReLU -> net2
// Linear(10, 5); x [N, 10] -> [N, 5]. Parameters net1.*, net2.* as PyTorch's.
// Trained with MSE loss. Thread safety: stateless forward, safe to share.
#pragma once

#include "cohort/core/random.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

class ToyModel : public Cloneable<ToyModel> {
 public:
  explicit ToyModel(Generator& gen);
  Tensor forward(const Tensor& x) override;

  Linear& net1() const { return *net1_; }
  Linear& net2() const { return *net2_; }

 private:
  Child<Linear> net1_, net2_;
};

}  // namespace cohort::nn
