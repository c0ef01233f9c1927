// Whole training checkpoints: model, optimizer and the position of a run
// (training_state.h), saved so that a resumed run continues exactly where the
// saved one was, and so that PyTorch users can read the model with ordinary
// safetensors tooling.
//
// Layout: one directory per checkpoint inside a checkpoint root
// (checkpoint_dir.h: names, atomic commit, pruning, the latest one),
//   <root>/step-00000120/model.safetensors      model.state_dict(), names as
//                                               in PyTorch ("conv1.weight"),
//                                               no prefix; the training state
//                                               in its __metadata__
//   <root>/step-00000120/optimizer.safetensors  optimizer.state_dict() (when
//                                               an optimizer is saved)
// so in PyTorch:  model.load_state_dict(safetensors.torch.load_file(
//                     "<root>/step-00000120/model.safetensors"))
// load_checkpoint reads sharded checkpoints too (sharded_checkpoint.h): this
// file sits above them, and they know nothing of it.
//
// Distributed jobs: the functions here are local; the distributed layer calls
// save_checkpoint on rank 0 and then a barrier, and load_checkpoint on every
// rank.
//
// Errors: IoError naming the path for unreadable, corrupt or truncated files;
// InvalidArgument when the checkpoint does not fit the model (naming the first
// mismatching tensor and both shapes) or optimizer. A failed load leaves the
// model and optimizer unchanged. Thread safety: none beyond that of the model
// and optimizer (do not train while saving).
#pragma once

#include <string>

#include "cohort/checkpoint/checkpoint_dir.h"
#include "cohort/checkpoint/safetensors.h"
#include "cohort/checkpoint/training_state.h"
#include "cohort/nn/module.h"
#include "cohort/optim/optimizer.h"

namespace cohort::checkpoint {

// Writes <root>/step-<state.step>/ (creating root when needed) and returns
// its path. An existing checkpoint of the same step is replaced.
std::string save_checkpoint(const std::string& root, const nn::Module& model,
                            const optim::Optimizer* optimizer, const TrainingState& state,
                            const SaveOptions& options = {});

// Loads a checkpoint into model (and optimizer, when given) and returns its
// training state. `path` is a checkpoint directory (whole, or sharded at any
// world size: sharded_checkpoint.h), a root (its latest checkpoint is used;
// IoError when it has none), or a model.safetensors file.
TrainingState load_checkpoint(const std::string& path, nn::Module& model,
                              optim::Optimizer* optimizer = nullptr);

// Throws InvalidArgument naming the first tensor of `model` whose name,
// shape or dtype differs in `dict` (both shapes), or the first extra tensor.
// `source` names the dict in the message.
void check_state_dict_matches(const nn::Module& model, const TensorDict& dict,
                              const std::string& source);

// Just the weights, one file: model.state_dict() as safetensors (atomic), and
// back. For exchanging weights with PyTorch and for inference.
void save_model(const std::string& path, const nn::Module& model, const Metadata& metadata = {});
void load_model(const std::string& path, nn::Module& model);

}  // namespace cohort::checkpoint
