// The checkpoints of the training loop (trainer.h): writing one in the format
// the options and the strategy ask for, and resuming a run from one. Besides
// the model and optimizer a checkpoint of `cohort train` records, in the
// training state's extra keys, the running totals of the epoch in progress,
// the data layout it was trained with (sampler replicas, batch size per
// rank), the model and data set names and a language model's shape, so that
// a resumed run continues the same data order from the same position, in a
// job of another size too, and `cohort eval` / `generate` / `predict` can
// rebuild the model.
//
// Internal to cohort/train. Thread safety: the training thread only. The
// functions are collective over `pg` when it is not null (every rank of the
// loop's group calls them); errors are checkpoint.h's and
// distributed_checkpoint.h's (IoError naming the path; a failure on one rank
// fails every rank).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cohort/checkpoint/async_checkpoint.h"
#include "cohort/checkpoint/training_state.h"
#include "cohort/core/random.h"
#include "cohort/data/sampler.h"
#include "cohort/distributed/process_group.h"
#include "cohort/train/train_options.h"
#include "cohort/train/train_strategy.h"

namespace cohort::train {

// The running totals of the epoch in progress. Between reductions each rank
// holds its own share; after reduce() rank 0 holds the totals, the others 0.
struct EpochTotals {
  double loss_sum = 0;
  double loss_count = 0;  // steps x ranks
  double samples = 0;
  double seconds = 0;  // before the current stretch (from a checkpoint)

  void reduce(distributed::ProcessGroup* pg);
};

// Where the loop stands: its optimizer steps, the sampler's position and the
// epoch's totals (as reduced on rank 0; totals.seconds is the epoch's
// training time so far; all zero at an epoch's end).
struct LoopPosition {
  int64_t step = 0;
  data::SamplerState sampler = {};
  EpochTotals totals = {};
};

// Writes a checkpoint of the run into options.checkpoint_dir and returns its
// path: each rank's shards when options.checkpoint_format is "sharded" and
// the strategy writes them, else the whole model and optimizer (gathered by
// sync_full_model; rank 0 writes when pg is not null). With `async`
// (--checkpoint-async true) the state is copied and written in the
// background: the path is where it will be once committed, and its outcome
// comes at the writer's next save or wait (checkpoint/async_checkpoint.h).
std::string save_run_checkpoint(const TrainOptions& options, Strategy resolved,
                                TrainStrategy& strategy, distributed::ProcessGroup* pg,
                                const Generator& gen, const LoopPosition& position,
                                checkpoint::AsyncCheckpointWriter* async = nullptr);

// What a resume restores: the loop's position in this job's terms (the
// sampler position rescaled to this job's replicas and batch size, at most
// sampler_size) and the epoch's totals as saved.
struct ResumedRun {
  std::string path;
  LoopPosition position;
};

// Resumes per options.resume (nullopt when it is empty or "auto" finds no
// checkpoint): loads the checkpoint into the strategy (its own ranges of a
// sharded checkpoint when the strategy reads them, else the whole model and
// optimizer, then after_resume) and gen's state. InvalidArgument when the
// checkpoint is of another model.
std::optional<ResumedRun> resume_run(const TrainOptions& options, TrainStrategy& strategy,
                                     distributed::ProcessGroup* pg, Generator& gen,
                                     int64_t sampler_size);

}  // namespace cohort::train
