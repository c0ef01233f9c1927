#include "cohort/nn/conv2d.h"

#include <cmath>

#include "cohort/nn/init.h"

namespace cohort::nn {

Conv2d::Conv2d(const Conv2dOptions& options, Generator& gen)
    : Cloneable("Conv2d"), options_(options) {
  COHORT_CHECK(options.in_channels() > 0 && options.out_channels() > 0 &&
                   options.kernel_size()[0] > 0 && options.kernel_size()[1] > 0,
               "Conv2d: channels and kernel size must be positive, got in={}, out={}, "
               "kernel=[{}, {}] (Conv2dOptions(in, out, kernel) sets them)",
               options.in_channels(), options.out_channels(), options.kernel_size()[0],
               options.kernel_size()[1]);
  COHORT_CHECK(options.stride()[0] > 0 && options.stride()[1] > 0 && options.padding()[0] >= 0 &&
                   options.padding()[1] >= 0,
               "Conv2d: stride must be positive and padding non-negative, got stride=[{}, {}], "
               "padding=[{}, {}]",
               options.stride()[0], options.stride()[1], options.padding()[0],
               options.padding()[1]);
  in_channels_ = options.in_channels();
  out_channels_ = options.out_channels();
  kernel_ = options.kernel_size();
  Tensor w = Tensor::empty({out_channels_, in_channels_, kernel_[0], kernel_[1]});
  init::kaiming_uniform_(w, std::sqrt(5.0), gen);
  register_parameter("weight", w);
  if (options.bias()) {
    Tensor b = Tensor::empty({out_channels_});
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_out(w).first));
    init::uniform_(b, -bound, bound, gen);
    register_parameter("bias", b);
  }
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
               Generator& gen, const Conv2dOptions& options)
    : Conv2d(Conv2dOptions(options)
                 .in_channels(in_channels)
                 .out_channels(out_channels)
                 .kernel_size(kernel_size),
             gen) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
               const Conv2dOptions& options)
    : Conv2d(in_channels, out_channels, std::array<int64_t, 2>{kernel_size, kernel_size}, gen,
             options) {}

std::string Conv2d::extra_repr() const {
  std::string s =
      fmt::format("{}, {}, kernel_size=({}, {}), stride=({}, {})", in_channels_, out_channels_,
                  kernel_[0], kernel_[1], options_.stride()[0], options_.stride()[1]);
  if (options_.padding()[0] != 0 || options_.padding()[1] != 0)
    s += fmt::format(", padding=({}, {})", options_.padding()[0], options_.padding()[1]);
  if (!options_.bias()) s += ", bias=False";
  return s;
}

void Conv2d::check_input(const Tensor& x) const {
  COHORT_CHECK(x.dim() == 4 && x.size(1) == in_channels_, "{}: input must be [N, {}, H, W], got {}",
               describe(), in_channels_, shape_str(x.sizes()));
  int64_t h = x.size(2) + 2 * options_.padding()[0], w = x.size(3) + 2 * options_.padding()[1];
  COHORT_CHECK(h >= kernel_[0] && w >= kernel_[1],
               "{}: input {} (padded to {}x{}) is smaller than the kernel {}x{}", describe(),
               shape_str(x.sizes()), h, w, kernel_[0], kernel_[1]);
}

Tensor Conv2d::forward(const Tensor& x) {
  check_input(x);
  return conv2d(x, weight(), bias(), options_.stride(), options_.padding());
}

Tensor Conv2d::forward_relu(const Tensor& x) {
  check_input(x);
  if (has_forward_hooks()) run_forward_pre_hooks();
  Tensor out = conv2d_relu(x, weight(), bias(), options_.stride(), options_.padding());
  if (has_forward_hooks()) run_forward_hooks(out);
  return out;
}

}  // namespace cohort::nn
