// The directory layout every checkpoint writer shares, and its mechanics.
// A checkpoint root holds one directory per checkpoint, named after its step:
//   <root>/step-00000120/   model.safetensors [+ optimizer.safetensors]
//                           (a whole checkpoint: checkpoint.h), or
//                           sharded.safetensors + one file per rank
//                           (a sharded one: sharded_checkpoint.h)
// and both carry the training state (training_state.h) in the metadata of
// the file named first.
//
// Atomicity: a writer fills a fresh temporary directory in the root
// (".tmp.step-...": begin_checkpoint_dir), fsyncing every file, and
// commit_checkpoint_dir renames it to its final name and fsyncs the root. A
// crash at any point leaves every earlier checkpoint intact and never a
// partial "step-*" directory, so latest_checkpoint() only sees complete ones.
// Temporaries of writers that died are removed by the next writer in the root.
//
// This file sits under both writers so that neither includes the other's
// declarations: checkpoint.h (whole checkpoints; load_checkpoint reads any)
// -> sharded_checkpoint.h -> checkpoint_dir.h -> training_state.h.
//
// Errors: IoError naming the path and the operation. Thread safety: one
// writer per root at a time; readers may run beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cohort/checkpoint/training_state.h"

namespace cohort::checkpoint {

// The files of a whole checkpoint directory.
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
// The file that makes a directory a sharded checkpoint (written last).
inline constexpr const char* kShardedMetaFile = "sharded.safetensors";

struct SaveOptions {
  // Keep only the newest `keep_last` checkpoints in the root (0: keep all).
  int64_t keep_last = 0;
};

// "step-00000120".
std::string step_dir_name(int64_t step);

// The newest complete checkpoint directory under root (highest step whose
// model file, or sharded.safetensors, validates; damaged newer ones are
// skipped with a warning), or nullopt when there is none or root does not
// exist.
std::optional<std::string> latest_checkpoint(const std::string& root);

// --resume: "" -> nullopt; "auto" -> latest_checkpoint(root); anything else
// is a path that must exist (IoError otherwise).
std::optional<std::string> resolve_resume(const std::string& resume, const std::string& root);

// Creates root when needed and checks that files can be created in it;
// IoError naming the path otherwise. Call before training starts.
void check_writable_dir(const std::string& root);

// A fresh temporary name in root (".tmp.<what>.<pid>.<n>"), not created.
std::string temp_sibling(const std::string& root, const std::string& what);

// Removes temporaries left in root by writers that no longer run.
void remove_stale_temporaries(const std::string& root);

// Creates root when needed, removes stale temporaries and creates a fresh
// temporary directory in root for the checkpoint `name`; returns its path.
// IoError naming `op` and the path.
std::string begin_checkpoint_dir(const std::string& root, const std::string& name, const char* op);

// Renames the finished temporary directory tmp to root/name (replacing an
// older one), fsyncs root and prunes to options.keep_last; returns the path.
// tmp is removed when the rename fails.
std::string commit_checkpoint_dir(const std::string& tmp, const std::string& root,
                                  const std::string& name, const SaveOptions& options);

}  // namespace cohort::checkpoint
