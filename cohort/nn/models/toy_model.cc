#include "cohort/nn/models/toy_model.h"

#include "cohort/nn/activation.h"

namespace cohort::nn {

ToyModel::ToyModel(Generator& gen) : Cloneable("ToyModel") {
  register_module("net1", std::make_shared<Linear>(10, 10, gen));
  register_module("relu", std::make_shared<ReLU>());
  register_module("net2", std::make_shared<Linear>(10, 5, gen));
}

Tensor ToyModel::forward(const Tensor& x) { return net2().forward(relu(net1().forward(x))); }

}  // namespace cohort::nn
