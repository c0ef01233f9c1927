// What `cohort eval` and `cohort predict` share: a reference model rebuilt in
// one process from a training checkpoint. Checkpoints of every strategy hold
// the whole model under single-process names (checkpoint.h), so a DDP,
// pipeline or tensor-parallel run's checkpoint loads into the plain model.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/checkpoint/safetensors.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/module.h"
#include "cohort/train/train_options.h"

namespace cohort::cli {

struct CheckpointModel {
  nn::ModulePtr model;      // in eval mode
  train::ModelKind kind{};  // the model it was built as
  std::string file;         // the model.safetensors (or sharded.safetensors) file read
  int64_t step = 0;         // the optimizer steps the checkpoint had taken
  // A safetensors file of weights alone (e.g. a PyTorch state_dict saved
  // with safetensors): no training state, step 0, no metadata.
  bool plain_weights = false;
  checkpoint::Metadata extra;  // TrainingState::extra ("model", ...)
  nn::GPTConfig gpt;           // a GPT's shape (kind gpt or gpt2)
};

// Loads `path` (a checkpoint directory, a checkpoint root: its latest
// checkpoint, a model.safetensors file, or a safetensors file of plain
// weights under the model's parameter names). `model_flag` is the --model the
// user gave ("" when none): the model is then that, else the checkpoint's
// "model" metadata, else net. Throws IoError naming `path` when it does not
// exist or holds no checkpoint, and InvalidArgument naming both models when
// --model contradicts the checkpoint's metadata.
CheckpointModel load_checkpoint_model(const std::string& path, const std::string& model_flag);

}  // namespace cohort::cli
