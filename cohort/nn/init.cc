#include "cohort/nn/init.h"

#include <cmath>

#include "cohort/autograd/grad_mode.h"

namespace cohort::nn::init {

std::pair<int64_t, int64_t> fan_in_and_out(const Tensor& t) {
  COHORT_CHECK(t.dim() >= 2, "init: fan in and fan out need a tensor of 2 or more dims, got {}",
               shape_str(t.sizes()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  NoGradGuard g;
  return cohort::uniform_(t, lo, hi, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  NoGradGuard g;
  return cohort::normal_(t, mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard g;
  t.fill_(value);
  return t;
}

Tensor& kaiming_uniform_(Tensor& t, double a, Generator& gen) {
  auto [fan_in, fan_out] = fan_in_and_out(t);
  COHORT_CHECK(fan_in > 0, "kaiming_uniform_: fan_in is 0 for shape {}", shape_str(t.sizes()));
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& xavier_uniform_(Tensor& t, Generator& gen, double gain) {
  auto [fan_in, fan_out] = fan_in_and_out(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return init::uniform_(t, -bound, bound, gen);
}

}  // namespace cohort::nn::init
