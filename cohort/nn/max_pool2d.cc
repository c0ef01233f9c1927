#include "cohort/nn/max_pool2d.h"

namespace cohort::nn {

MaxPool2d::MaxPool2d(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                     std::array<int64_t, 2> padding)
    : Cloneable("MaxPool2d"), kernel_(kernel_size), padding_(padding) {
  stride_ = (stride[0] == 0 && stride[1] == 0) ? kernel_size : stride;
  COHORT_CHECK(kernel_[0] > 0 && kernel_[1] > 0 && stride_[0] > 0 && stride_[1] > 0,
               "MaxPool2d: kernel size and stride must be positive, got kernel=[{}, {}], "
               "stride=[{}, {}]",
               kernel_[0], kernel_[1], stride_[0], stride_[1]);
  COHORT_CHECK(padding_[0] >= 0 && padding_[1] >= 0 && 2 * padding_[0] <= kernel_[0] &&
                   2 * padding_[1] <= kernel_[1],
               "MaxPool2d: padding must be in [0, kernel/2], got [{}, {}] for kernel [{}, {}]",
               padding_[0], padding_[1], kernel_[0], kernel_[1]);
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size=({}, {}), stride=({}, {}), padding=({}, {})", kernel_[0],
                     kernel_[1], stride_[0], stride_[1], padding_[0], padding_[1]);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 4, "{}: input must be 4-D [N, C, H, W], got {}", describe(),
               shape_str(x.sizes()));
  COHORT_CHECK(
      x.size(2) + 2 * padding_[0] >= kernel_[0] && x.size(3) + 2 * padding_[1] >= kernel_[1],
      "{}: input {} is smaller than the kernel", describe(), shape_str(x.sizes()));
  return max_pool2d(x, kernel_, stride_, padding_);
}

}  // namespace cohort::nn
