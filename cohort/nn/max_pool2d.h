// nn::MaxPool2d: max pooling over NCHW float32 input, as torch.nn.MaxPool2d
// (no dilation, floor mode). x [N, C, H, W] -> [N, C, Ho, Wo],
// Ho = (H + 2 pad - k) / stride + 1. stride defaults to the kernel size.
// Stateless; safe to share between threads.
#pragma once

#include <array>

#include "cohort/nn/module.h"

namespace cohort::nn {

class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  // stride {0, 0} means "the kernel size".
  MaxPool2d(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
            std::array<int64_t, 2> padding = {0, 0});
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : MaxPool2d({kernel_size, kernel_size}, {stride, stride}, {padding, padding}) {}

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  std::array<int64_t, 2> kernel_;
  std::array<int64_t, 2> stride_;
  std::array<int64_t, 2> padding_;
};

}  // namespace cohort::nn
