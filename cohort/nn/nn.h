// Umbrella header for cohort::nn: Module, layers, losses, init, reference models.
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
#include "cohort/nn/models/net.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/nn/module.h"
#include "cohort/nn/sequential.h"
