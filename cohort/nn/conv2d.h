// nn::Conv2d: 2-D convolution over NCHW float32 input, as torch.nn.Conv2d
// (groups = 1, dilation = 1).
// x [N, in_channels, H, W] -> y [N, out_channels, Ho, Wo] with
// Ho = (H + 2 pad_h - kh) / stride_h + 1 (likewise Wo).
// weight [out, in, kh, kw], bias [out]. Initialisation (PyTorch's): weight and
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in * kh * kw, drawn from
// gen in that order. Options as LibTorch spells them:
//   Conv2d conv(Conv2dOptions(1, 10, 5).stride(2).padding(1).bias(false), gen);
// or in cohort's form Conv2d(1, 10, 5, gen, Conv2dOptions().stride(2)).
// Thread safety: see module.h.
#pragma once

#include <array>

#include "cohort/core/random.h"
#include "cohort/nn/expanding_array.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

// Setters return *this for chaining; getters share the name (LibTorch's
// TORCH_ARG). in/out channels and kernel size are 0 in a default-constructed
// Conv2dOptions: the Conv2d(in, out, kernel, gen, options) form supplies them.
class Conv2dOptions {
 public:
  Conv2dOptions() = default;
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  Conv2dOptions& in_channels(int64_t v) { return in_channels_ = v, *this; }
  Conv2dOptions& out_channels(int64_t v) { return out_channels_ = v, *this; }
  Conv2dOptions& kernel_size(ExpandingArray<2> v) { return kernel_size_ = v, *this; }
  Conv2dOptions& stride(ExpandingArray<2> v) { return stride_ = v, *this; }
  Conv2dOptions& padding(ExpandingArray<2> v) { return padding_ = v, *this; }
  Conv2dOptions& bias(bool v) { return bias_ = v, *this; }

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const std::array<int64_t, 2>& kernel_size() const { return kernel_size_; }
  const std::array<int64_t, 2>& stride() const { return stride_; }
  const std::array<int64_t, 2>& padding() const { return padding_; }
  bool bias() const { return bias_; }

 private:
  int64_t in_channels_ = 0;
  int64_t out_channels_ = 0;
  std::array<int64_t, 2> kernel_size_{0, 0};
  std::array<int64_t, 2> stride_{1, 1};
  std::array<int64_t, 2> padding_{0, 0};
  bool bias_ = true;
};

class Conv2d : public Cloneable<Conv2d> {
 public:
  // Channels and kernel size from `options` (throws InvalidArgument when they are unset).
  Conv2d(const Conv2dOptions& options, Generator& gen);
  // Channels and kernel size from the arguments; those of `options` are ignored.
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Generator& gen, const Conv2dOptions& options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
         const Conv2dOptions& options = {});

  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one pass (the kernel's fused epilogue), between the
  // module's forward hooks as a call runs forward (ZeRO stage 3 gathers on them).
  Tensor forward_relu(const Tensor& x);
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  std::array<int64_t, 2> kernel_size() const { return kernel_; }
  const Conv2dOptions& options() const { return options_; }
  const Tensor& weight() const { return param(0); }
  Tensor& weight() { return param(0); }
  Tensor bias() const { return options_.bias() ? param(1) : Tensor(); }

 private:
  void check_input(const Tensor& x) const;

  int64_t in_channels_;
  int64_t out_channels_;
  std::array<int64_t, 2> kernel_;
  Conv2dOptions options_;
};

}  // namespace cohort::nn
