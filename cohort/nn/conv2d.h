// nn::Conv2d: 2-D convolution over NCHW float32 input, as torch.nn.Conv2d
// (groups = 1, dilation = 1).
// x [N, in_channels, H, W] -> y [N, out_channels, Ho, Wo] with
// Ho = (H + 2 pad_h - kh) / stride_h + 1 (likewise Wo).
// weight [out, in, kh, kw], bias [out]. Initialisation (PyTorch's): weight and
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in * kh * kw, drawn from
// gen in that order. Thread safety: see module.h.
#pragma once

#include <array>

#include "cohort/core/random.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  bool bias = true;
};

class Conv2d : public Cloneable<Conv2d> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Generator& gen, const Conv2dOptions& options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
         const Conv2dOptions& options = {});

  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one pass (the kernel's fused epilogue).
  Tensor forward_relu(const Tensor& x);
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  std::array<int64_t, 2> kernel_size() const { return kernel_; }
  const Conv2dOptions& options() const { return options_; }
  const Tensor& weight() const { return param(0); }
  Tensor& weight() { return param(0); }
  Tensor bias() const { return options_.bias ? param(1) : Tensor(); }

 private:
  void check_input(const Tensor& x) const;

  int64_t in_channels_;
  int64_t out_channels_;
  std::array<int64_t, 2> kernel_;
  Conv2dOptions options_;
};

}  // namespace cohort::nn
