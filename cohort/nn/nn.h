// Umbrella header for cohort::nn: Module, layers, losses, init, reference models.
//
// A training step of the reference recipe (see also cohort/optim/optim.h):
//   Generator gen(seed);
//   nn::Net net(gen);                                   // PyTorch's default init
//   optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
//   opt.zero_grad();
//   Tensor loss = nll_loss(net(images), labels);        // images [N, 1, 28, 28]
//   loss.backward();
//   optim::clip_grad_norm(net.parameters(), 10.0);
//   opt.step();
// Saving and restoring (TensorDict: ordered name -> Tensor, PyTorch's names):
//   TensorDict model_state = net.state_dict();         // conv1.weight, ...
//   TensorDict optim_state = opt.state_dict();         // state.0.momentum_buffer, ...
//   net.load_state_dict(model_state);                  // strict; errors name the key
//   opt.load_state_dict(optim_state);
#pragma once

#include "cohort/nn/activation.h"
#include "cohort/nn/batch_norm.h"
#include "cohort/nn/conv2d.h"
#include "cohort/nn/dropout.h"
#include "cohort/nn/embedding.h"
#include "cohort/nn/flatten.h"
#include "cohort/nn/init.h"
#include "cohort/nn/layer_norm.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/loss.h"
#include "cohort/nn/max_pool2d.h"
#include "cohort/nn/models/a_simple_net.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/net.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/nn/module.h"
#include "cohort/nn/module_dict.h"
#include "cohort/nn/multihead_attention.h"
#include "cohort/nn/sequential.h"
