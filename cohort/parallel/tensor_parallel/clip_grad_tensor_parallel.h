// Gradient clipping of a tensor-parallel model by the norm of the FULL
// model's gradient, as Megatron-LM's clip_grad_norm_fp32: the gradients of
// sharded parameters (TensorParallelLayer, tensor_parallel_layer.h) are
// spread over the ranks of tp, so their norm^p parts are summed over tp (max
// for norm_type = inf); replicated parameters hold the same gradient on
// every rank and are counted once. Then every gradient is scaled as
// optim::clip_grad_norm does (coefficient max_norm / (total + 1e-6) when
// below 1), so the result equals clip_grad_norm on the unsplit model.
// Returns the total norm before clipping, the same on every rank.
//
// Collective over tp: exactly one all-reduce per call, on every rank, even
// when no parameter has a gradient. error_if_nonfinite: InvalidArgument
// (naming the rank) when the total is NaN or inf, with no gradient changed.
// Thread safety: no backward on the model at the same time.
#pragma once

#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"

namespace cohort::parallel {

double clip_grad_norm_tensor_parallel(const nn::Module& model, double max_norm,
                                      distributed::ProcessGroup& tp, double norm_type = 2.0,
                                      bool error_if_nonfinite = false);

// The same total norm without clipping (also collective).
double grad_norm_tensor_parallel(const nn::Module& model, distributed::ProcessGroup& tp,
                                 double norm_type = 2.0);

}  // namespace cohort::parallel
