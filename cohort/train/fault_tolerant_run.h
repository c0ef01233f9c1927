// `cohort train --fault-tolerant` under `cohort run --fault-tolerant`: the
// training loop on a ReplicaManager (parallel/fault_tolerance/): every worker
// is a replica, or every COHORT_FT_REPLICA_SIZE workers are one (ZeRO inside
// it under --strategy zero; fault_tolerant_model.h); when one dies the others
// go on at the next step, and the launcher's replacement receives the state
// from a live one and trains on. No process but the dead replica's restarts,
// and no checkpoint is read.
//
// Data: one global order (the single-process order: a seeded shuffle per
// epoch, RandomSampler) walked by a cursor kept in the replicated state; a
// committed step of n participants takes the next n x batch_size examples
// (participant r the r-th batch of them), so whatever the membership no
// example is skipped or trained twice; the run ends when fewer than n x
// batch_size remain of epochs x the training set (the tail is dropped), or
// at max_steps. Logs, epoch summaries and checkpoints (whole, at each
// epoch's end and at the end, written by one process) are the duties of the
// participant of rank 0 (the lowest live replica id), which may change;
// the reported loss is its batch's. Evaluation at an epoch's end is sharded
// over the participants; when a member is lost during it, it is skipped
// (logged) and training goes on.
//
// The job is options.fault_tolerant_job, which the CLI reads from `cohort
// run`'s environment: RANK (the replica id "rank<RANK>", kept by a
// replacement), WORLD_SIZE (the first quorum waits for that many),
// MASTER_ADDR / MASTER_PORT (the store, whose server runs the quorum
// service) and COHORT_FT_REPLACEMENT=1 on a worker the launcher restarted;
// the store's token is COHORT_TOKEN. A language model draws each step's
// random windows for the ranks taking part (WindowSampler's draw at that
// step and that many ranks: the same on every one); float32 with the plain average (no
// bf16, comm hooks, SyncBatchNorm), no metrics file or trace, no --resume;
// the native backend on the CPU. Errors: InvalidArgument for those before anything starts; the
// ReplicaManager's when the quorum service is gone.
#pragma once

#include "cohort/train/trainer.h"

namespace cohort::train {

// Throws InvalidArgument when `options` (with fault_tolerant set) asks for
// something the fault-tolerant loop does not do, naming it.
void check_fault_tolerant_options(const TrainOptions& options);

TrainResult run_fault_tolerant(const TrainOptions& options, TrainObserver* observer);

}  // namespace cohort::train
