// Sharded checkpoints of a ZeRO model and its optimizer (the file format:
// sharded_checkpoint.h). Saving gathers nothing: rank r writes
// chunk r (c = ceil(n / N) elements, the FlatLayout chunk it owns) of every
// parameter -- stage 3 from its own segment, stages 1 and 2 from the full
// parameters they hold -- and of every optimizer state tensor, which is
// already just that chunk; buffers and the optimizer's scalars and group
// options are split the same way. Names are the unsharded ones
// ("model/<state_dict name>", "optimizer/state.<i>.exp_avg" with the shapes
// of the whole parameters), so the files convert to and from a whole (DDP)
// checkpoint with `cohort reshard`.
//
// Loading takes any checkpoint (sharded at any world size, or whole) into a
// ShardedDataParallel of any world size and stage: stage 3 reads only its
// chunk of each parameter; stages 1 and 2 read the whole parameters (which
// they hold); every rank reads its chunk of the optimizer state and the
// whole of its small tensors. Each read touches only the files whose pieces
// overlap the range.
//
//   auto path = save_zero_checkpoint(opt, root, state);  // collective
//   auto src = open_checkpoint(path);                    // at any world size
//   load_zero_checkpoint(*src, opt);
//
// Errors: InvalidArgument naming the checkpoint, the tensor and both shapes
// (or dtypes) when it does not fit the model or optimizer, before anything
// is changed for the model; IoError from the files. Thread safety: the
// training thread; save is collective over the model's group.
#pragma once

#include <string>
#include <vector>

#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

namespace cohort::checkpoint {

// This rank's pieces of the model's state_dict and of the optimizer state.
// No communication.
std::vector<ShardPiece> zero_checkpoint_pieces(parallel::ShardedOptimizer& opt);

// Collective: a sharded checkpoint <root>/step-<state.step>/ of opt.model()
// and opt; `info` is added to its metadata. Returns its path on every rank.
std::string save_zero_checkpoint(parallel::ShardedOptimizer& opt, const std::string& root,
                                 const TrainingState& state, const Metadata& info = {},
                                 const SaveOptions& options = {});

// Loads this rank's part of `src` into opt.model() and opt (see the header
// comment). No communication.
void load_zero_checkpoint(const CheckpointSource& src, parallel::ShardedOptimizer& opt);

}  // namespace cohort::checkpoint
