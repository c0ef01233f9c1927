#include "cohort/nn/models/sequential_models.h"

#include "cohort/base/error.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/conv2d.h"
#include "cohort/nn/flatten.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/max_pool2d.h"

namespace cohort::nn {

std::shared_ptr<Sequential> make_net_sequential(Generator& gen) {
  auto s = std::make_shared<Sequential>();
  // Registration (and so initialisation) order is Net's: conv1, conv2, fc1, fc2.
  s->add("conv1", std::make_shared<Conv2d>(1, 20, 5, gen));
  s->add("relu1", std::make_shared<ReLU>());
  s->add("conv2", std::make_shared<Conv2d>(20, 20, 5, gen));
  s->add("relu2", std::make_shared<ReLU>());
  s->add("pool", std::make_shared<MaxPool2d>(2));
  s->add("flatten", std::make_shared<Flatten>(1));
  s->add("fc1", std::make_shared<Linear>(2000, 50, gen));
  s->add("relu3", std::make_shared<ReLU>());
  s->add("fc2", std::make_shared<Linear>(50, 10, gen));
  s->add("log_softmax", std::make_shared<LogSoftmax>(1));
  return s;
}

std::shared_ptr<Sequential> make_mlp(Generator& gen, const MlpOptions& o) {
  COHORT_CHECK(o.in_features > 0 && o.width > 0 && o.hidden_layers >= 1 && o.classes > 0,
               "make_mlp: in_features, width and classes must be positive and hidden_layers at "
               "least 1, got {}, {}, {}, {}",
               o.in_features, o.width, o.classes, o.hidden_layers);
  auto s = std::make_shared<Sequential>();
  s->push_back(std::make_shared<Flatten>(1));
  int64_t in = o.in_features;
  for (int64_t i = 0; i < o.hidden_layers; ++i) {
    s->push_back(std::make_shared<Linear>(in, o.width, gen));
    s->push_back(std::make_shared<ReLU>());
    in = o.width;
  }
  s->push_back(std::make_shared<Linear>(in, o.classes, gen));
  s->push_back(std::make_shared<LogSoftmax>(1));
  return s;
}

}  // namespace cohort::nn
