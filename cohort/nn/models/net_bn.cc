#include "cohort/nn/models/net_bn.h"

namespace cohort::nn {

NetBn::NetBn(Generator& gen) : Cloneable("NetBn") {
  // Registered in forward order (conv1, bn1, conv2, bn2, ...), which names
  // the state dict as PyTorch's would; drawn in Net's order.
  auto conv1 = std::make_shared<Conv2d>(1, 20, 5, gen);
  auto conv2 = std::make_shared<Conv2d>(20, 20, 5, gen);
  conv1_ = register_module("conv1", conv1);
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(20));
  conv2_ = register_module("conv2", conv2);
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(20));
  fc1_ = register_module("fc1", std::make_shared<Linear>(2000, 50, gen));
  fc2_ = register_module("fc2", std::make_shared<Linear>(50, 10, gen));
}

Tensor NetBn::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
               "NetBn: input must be [N, 1, 28, 28], got {}", shape_str(x.sizes()));
  Tensor h = relu(bn1_(conv1_(x)));
  h = relu(bn2_(conv2_(h)));
  h = max_pool2d(h, {2, 2});
  h = flatten(h, 1);
  h = relu(fc1_(h));
  return log_softmax(fc2_(h), 1);
}

}  // namespace cohort::nn
