#include "cohort/nn/models/a_simple_net.h"

#include "cohort/nn/activation.h"
#include "cohort/nn/linear.h"

namespace cohort::nn {

ASimpleNet::ASimpleNet(Generator& gen) : Cloneable("ASimpleNet") {
  auto seq = std::make_shared<Sequential>();
  for (int i = 0; i < 3; ++i) {
    seq->push_back(std::make_shared<Linear>(3, 3, gen, /*bias=*/false));
    seq->push_back(std::make_shared<ReLU>());
  }
  register_module("net", seq);
}

ASimpleNet::ASimpleNet(const ASimpleNet& other)
    : Cloneable(other),
      reporter_(other.reporter_),
      last_batch_size_(other.last_batch_size_.load()) {}

Tensor ASimpleNet::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 2 && x.size(1) == 3, "ASimpleNet: input must be [N, 3], got {}",
               shape_str(x.sizes()));
  last_batch_size_.store(x.size(0));
  if (reporter_) reporter_(x.size(0));
  return net().forward(x);
}

}  // namespace cohort::nn
