// Private to cohort/checkpoint: the steps of the synchronous writers
// (checkpoint.cc, sharded_checkpoint.cc) that the background writer
// (async_checkpoint.cc) runs on its own schedule, so both write the same
// bytes through the same code. Not installed (an _impl.h).
#pragma once

#include <exception>
#include <string>

#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/checkpoint/training_state.h"
#include "cohort/core/tensor_dict.h"
#include "cohort/distributed/process_group.h"

namespace cohort::checkpoint::detail {

// The files of a whole checkpoint (model.safetensors carrying the training
// state, optimizer.safetensors when optimizer_state is not null) into the
// existing directory dir, each atomically: what save_checkpoint writes before
// its commit.
void write_whole_files(const std::string& dir, const TensorDict& model_state,
                       const TensorDict* optimizer_state, const TrainingState& state);

// sharded.safetensors of a sharded checkpoint of `world` rank files into dir
// (written last, after every rank file).
void write_sharded_meta(const std::string& dir, const TrainingState& state, const Metadata& info,
                        int world);

// Collective: broadcasts s from `root`.
std::string broadcast_string(distributed::ProcessGroup& group, std::string s, int root);

// Collective: every rank's outcome of a step. Throws on every rank when any
// rank failed: the failing rank rethrows its own exception, the others an
// IoError naming `op`, the first failing rank and its message.
void agree(distributed::ProcessGroup& group, const char* op, std::exception_ptr error);

// Collective: rank 0 makes the temporary directory of a sharded checkpoint
// of `step` in root (begin_checkpoint_dir) and every rank learns its path;
// a failure there throws on every rank (agree, naming `op`).
std::string begin_sharded_dir(distributed::ProcessGroup& group, const std::string& root,
                              const std::string& name, int64_t step, const char* op);

}  // namespace cohort::checkpoint::detail
