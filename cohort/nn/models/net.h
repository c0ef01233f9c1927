// The reference CNN of the DDP tutorial (docs/reference.md, bench/peer/fashion.py):
//   x [N, 1, 28, 28] -> conv1 Conv2d(1, 20, 5) -> ReLU    [N, 20, 24, 24]
//                    -> conv2 Conv2d(20, 20, 5) -> ReLU   [N, 20, 20, 20]
//                    -> MaxPool2d(2)                       [N, 20, 10, 10]
//                    -> flatten                            [N, 2000]
//                    -> fc1 Linear(2000, 50) -> ReLU       [N, 50]
//                    -> fc2 Linear(50, 10) -> log_softmax  [N, 10]
// Parameters conv1.{weight,bias}, conv2.*, fc1.*, fc2.* as PyTorch's Net.
// Train with NLL loss on the output (it is log-probabilities).
// forward uses the fused conv+ReLU kernels and views (no extra copies).
// Thread safety: see module.h (stateless forward: safe to share).
#pragma once

#include "cohort/core/random.h"
#include "cohort/nn/conv2d.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

class Net : public Cloneable<Net> {
 public:
  // Initialises conv1, conv2, fc1, fc2 from gen in that order (PyTorch's init).
  explicit Net(Generator& gen);

  // x [N, 1, 28, 28] float32 -> log-probabilities [N, 10].
  Tensor forward(const Tensor& x) override;

  Conv2d& conv1() const { return *conv1_; }
  Conv2d& conv2() const { return *conv2_; }
  Linear& fc1() const { return *fc1_; }
  Linear& fc2() const { return *fc2_; }

 private:
  Child<Conv2d> conv1_, conv2_;
  Child<Linear> fc1_, fc2_;
};

}  // namespace cohort::nn
