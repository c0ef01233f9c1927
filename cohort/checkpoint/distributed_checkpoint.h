// Checkpoints in a distributed job: a thin layer over checkpoint.h. Rank 0 of
// the group writes; every rank learns the outcome before it returns, so no
// rank trains on past a checkpoint that is not complete, and a failed write
// fails every rank (rank 0 with its own exception, the others with IoError
// naming rank 0's message) instead of leaving them waiting.
// Loading: rank 0 picks the checkpoint (latest_checkpoint for "auto") and
// tells the others, so all ranks load the same one even while files change;
// every rank then reads it from the (shared) file system.
//
// The checkpoints are the same files a single process writes, so a
// checkpoint from a distributed run loads in a single process and back.
// Collective calls: every rank of the group must call them, in the same
// order. Bounded by the group's timeout.
#pragma once

#include <optional>
#include <string>

#include "cohort/checkpoint/checkpoint.h"
#include "cohort/distributed/process_group.h"

namespace cohort::checkpoint {

// Rank 0 saves (see save_checkpoint); returns the checkpoint's path on every
// rank.
std::string save_checkpoint(distributed::ProcessGroup& group, const std::string& root,
                            const nn::Module& model, const optim::Optimizer* optimizer,
                            const TrainingState& state, const SaveOptions& options = {});

// Rank 0 resolves `resume` as resolve_resume(resume, root) does; every rank
// gets the same answer (or the same error).
std::optional<std::string> resolve_resume(distributed::ProcessGroup& group,
                                          const std::string& resume, const std::string& root);

// Rank 0 runs check_writable_dir(root); every rank gets its error, if any.
void check_writable_dir(distributed::ProcessGroup& group, const std::string& root);

}  // namespace cohort::checkpoint
