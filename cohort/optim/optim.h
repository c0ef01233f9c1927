// Umbrella header for cohort::optim: optimizers, LR schedulers, gradient clipping.
#pragma once

#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/lr_scheduler.h"
#include "cohort/optim/optimizer.h"
#include "cohort/optim/sgd.h"
