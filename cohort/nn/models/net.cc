#include "cohort/nn/models/net.h"

namespace cohort::nn {

Net::Net(Generator& gen) : Cloneable("Net") {
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(1, 20, 5, gen));
  conv2_ = register_module("conv2", std::make_shared<Conv2d>(20, 20, 5, gen));
  fc1_ = register_module("fc1", std::make_shared<Linear>(2000, 50, gen));
  fc2_ = register_module("fc2", std::make_shared<Linear>(50, 10, gen));
}

Tensor Net::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
               "Net: input must be [N, 1, 28, 28], got {}", shape_str(x.sizes()));
  Tensor h = conv1_->forward_relu(x);
  h = conv2_->forward_relu(h);
  h = max_pool2d(h, {2, 2});
  h = flatten(h, 1);
  h = relu(fc1_(h));
  return log_softmax(fc2_(h), 1);
}

}  // namespace cohort::nn
