// The reference models as nn::Sequential, the form that pipeline parallelism
// cuts into stages (a stage is a run of consecutive children).
//
//   make_net_sequential(gen): Net (net.h) layer by layer:
//     conv1 Conv2d(1, 20, 5), relu1, conv2 Conv2d(20, 20, 5), relu2,
//     pool MaxPool2d(2), flatten, fc1 Linear(2000, 50), relu3,
//     fc2 Linear(50, 10), log_softmax           x [N, 1, 28, 28] -> [N, 10]
//   Same parameter names as Net ("conv1.weight", ..., "fc2.bias") and the
//   same draws from gen, so one seed gives the same weights and state dicts
//   load into either form.
//
//   make_mlp(gen, options): the deeper model on which splitting pays:
//     flatten, then `hidden_layers` x (Linear(width) + ReLU), then
//     Linear(width, classes) and log_softmax   x [N, 1, 28, 28] -> [N, 10]
//   Children named "0", "1", ... as PyTorch's nn.Sequential would be.
//
// Both produce log-probabilities: train with NLL loss. Stateless forward.
#pragma once

#include <cstdint>
#include <memory>

#include "cohort/core/random.h"
#include "cohort/nn/sequential.h"

namespace cohort::nn {

std::shared_ptr<Sequential> make_net_sequential(Generator& gen);

struct MlpOptions {
  int64_t in_features = 784;
  int64_t width = 1024;
  int64_t hidden_layers = 4;
  int64_t classes = 10;
};

std::shared_ptr<Sequential> make_mlp(Generator& gen, const MlpOptions& options = {});

}  // namespace cohort::nn
