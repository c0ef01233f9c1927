#include "cohort/nn/models/toy_model.h"

#include "cohort/nn/activation.h"

namespace cohort::nn {

ToyModel::ToyModel(Generator& gen) : Cloneable("ToyModel") {
  net1_ = register_module("net1", std::make_shared<Linear>(10, 10, gen));
  register_module("relu", std::make_shared<ReLU>());
  net2_ = register_module("net2", std::make_shared<Linear>(10, 5, gen));
}

Tensor ToyModel::forward(const Tensor& x) { return net2_(relu(net1_(x))); }

}  // namespace cohort::nn
