// Weight initialisation (torch.nn.init), drawing from an explicit Generator.
// All functions fill `t` in place without recording autograd and return it.
// Fan computation follows PyTorch: for a weight [out, in, *k], fan_in =
// in * prod(k), fan_out = out * prod(k).
#pragma once

#include <cstdint>
#include <utility>

#include "cohort/core/random.h"
#include "cohort/core/tensor.h"

namespace cohort::nn::init {

// {fan_in, fan_out}; needs at least 2 dims.
std::pair<int64_t, int64_t> fan_in_and_out(const Tensor& t);

Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen);
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen);
Tensor& constant_(Tensor& t, double value);
// U(-bound, bound), bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2))
// (leaky_relu gain, PyTorch's default nonlinearity). a = sqrt(5) gives
// bound = 1/sqrt(fan_in): the default of Linear and Conv2d.
Tensor& kaiming_uniform_(Tensor& t, double a, Generator& gen);
// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, Generator& gen, double gain = 1.0);

}  // namespace cohort::nn::init
