// Umbrella header: tensors, autograd, the differentiable ops and the thread
// budget (cohort::num_threads / set_num_threads).
// (nn, optim, data and the distributed layers have their own headers.)
#pragma once

#include "cohort/autograd/engine.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/gradcheck.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/parallel.h"
#include "cohort/core/dtype.h"
#include "cohort/core/random.h"
#include "cohort/core/tensor.h"
