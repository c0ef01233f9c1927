// The full (unsplit) state dict of a tensor-parallel model: what a
// checkpoint holds, so that it loads into the single-process model and into
// a tensor-parallel model of any group size that divides the split dims.
//
//   TensorDict full = full_state_dict(*tp_model, *tp);      // every rank
//   single_model->load_state_dict(full);                    // equal keys and shapes
//   load_full_state_dict(*other_tp_model, full, *other_tp); // each rank takes its slice
//
// Sharded parameters are found through TensorParallelLayer
// (tensor_parallel_layer.h); everything else (replicated parameters, buffers)
// is the same on every rank and taken as is.
// Failure: a layer split over another group than tp, or a shape that does
// not fit, throws InvalidArgument naming the rank, the key and both shapes.
// Thread safety: no training on the model at the same time.
#pragma once

#include "cohort/core/tensor_dict.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"

namespace cohort::parallel {

// Collective over tp (every rank calls it, in the same order relative to its
// other ops on tp): all-gathers each sharded parameter along its split dim
// and returns, on every rank, the full dict in model.state_dict() order --
// the single-process model's keys and shapes. Values are copies.
TensorDict full_state_dict(const nn::Module& model, distributed::ProcessGroup& tp);

// Loads a full dict: each rank copies its slice of every sharded parameter
// and all of every other entry (strict: missing and unexpected keys are
// errors too, listed in the message). Local, no communication. Everything is
// checked before anything is copied.
void load_full_state_dict(nn::Module& model, const TensorDict& full, distributed::ProcessGroup& tp);

}  // namespace cohort::parallel
