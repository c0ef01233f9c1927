// The DDP tutorial's CNN (net.h) with a BatchNorm2d after each convolution,
// the model `cohort train --model net-bn` trains (and, with
// --sync-batchnorm, converts with parallel::convert_sync_batchnorm):
//   x [N, 1, 28, 28] -> conv1 Conv2d(1, 20, 5) -> bn1 BatchNorm2d(20) -> ReLU   [N, 20, 24, 24]
//                    -> conv2 Conv2d(20, 20, 5) -> bn2 BatchNorm2d(20) -> ReLU  [N, 20, 20, 20]
//                    -> MaxPool2d(2) -> flatten                             [N, 2000]
//                    -> fc1 Linear(2000, 50) -> ReLU -> fc2 Linear(50, 10)
//                    -> log_softmax                                         [N, 10]
// Parameters and buffers conv1.*, bn1.{weight, bias, running_mean,
// running_var, num_batches_tracked}, conv2.*, bn2.*, fc1.*, fc2.*, as PyTorch
// names them. Train with NLL loss on the output.
// Thread safety: see module.h (BatchNorm in training mode writes its
// buffers: one thread per instance).
#pragma once

#include "cohort/core/random.h"
#include "cohort/nn/batch_norm.h"
#include "cohort/nn/conv2d.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

class NetBn : public Cloneable<NetBn> {
 public:
  // Initialises conv1, conv2, fc1, fc2 from gen in that order, as Net does
  // (so their initial weights are Net's for a seed); BatchNorm starts at 1, 0.
  explicit NetBn(Generator& gen);

  // x [N, 1, 28, 28] float32 -> log-probabilities [N, 10].
  Tensor forward(const Tensor& x) override;

  BatchNorm2d& bn1() const { return *bn1_; }
  BatchNorm2d& bn2() const { return *bn2_; }

 private:
  Child<Conv2d> conv1_, conv2_;
  Child<BatchNorm2d> bn1_, bn2_;
  Child<Linear> fc1_, fc2_;
};

}  // namespace cohort::nn
