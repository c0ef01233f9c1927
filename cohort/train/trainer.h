// Trainer: the training loop behind `cohort train`. Trains a reference model
// (workload.h) for some epochs in one of seven ways (train_strategy.h):
//   single    one process, intra-op threads only;
//   ddp       one process per rank of a job started by `cohort run` or mpirun:
//             init_worker_group(env://; on --device cuda each worker takes
//             its own GPU), DistributedDataParallel, a
//             DistributedSampler per rank, test accuracy sharded and reduced;
//   dp        one process, DataParallel replicas on threads;
//   pipeline  the model's layers in stages over pipeline_stages ranks
//             (micro-batches, a schedule), data parallel over the rest;
//   tensor    fc1/fc2 split over the ranks (Megatron-style), same batch on all;
//   ps        data parallel through a parameter server (ps_strategy.h);
//   zero      data parallel with sharded optimizer state, gradients and
//             parameters (ZeRO stages 1-3, zero_strategy.h).
// Every strategy draws its batches from a DistributedSampler (one replica
// when not distributed: a seeded shuffle, PyTorch's order) whose epoch the
// loop advances with set_epoch, so every epoch has a new order and a resumed
// run continues the same order from the same position.
//
// Checkpoints (checkpoint.h layout): every `checkpoint_every` steps, at the
// end of every epoch and when the run stops at max_steps; in a distributed job rank 0
// writes (atomically) and every rank learns the outcome before going on
// (distributed_checkpoint.h). A checkpoint holds
// the whole model under single-process names (without DDP's "module."
// prefix; a pipeline's or tensor-parallel job's parts gathered), so it loads in one process,
// the optimizer, the step, the sampler position and the epoch's running
// loss, so `resume` ("auto": the latest complete checkpoint) continues as if
// the run had not stopped: the same data order, the same parameters.
//
// Errors: a missing data set, an unwritable checkpoint directory or metrics
// file fail before the first step (IoError naming the path); a loss that is
// NaN or infinite stops the run with an Error naming the step, the epoch and
// the rank.
//
// Observer calls happen on the main rank only (rank 0; always in one
// process), on the training thread. Thread safety: one run at a time per
// Trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/checkpoint/checkpoint.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"
#include "cohort/train/train_options.h"

namespace cohort::train {

struct RunInfo {
  Strategy strategy = Strategy::kSingle;  // resolved (never kAuto)
  int rank = 0;
  int world_size = 1;
  int threads = 1;  // intra-op threads per process (per replica for dp)
  int replicas = 1;
  std::string layout;  // how the model is split, e.g. "pipeline 1f1b: 2 stages x 1 replica"
  // Where this rank trains (the worker's own GPU in a job on --device cuda).
  Device device = kCPU;
  // A job's group backend and why it was chosen ("" in one process), e.g.
  // "native" and "2 local ranks share 1 GPU: NCCL refuses ...".
  std::string backend;
  std::string backend_reason;
  int64_t train_examples = 0;  // examples, or tokens of a language model's training split
  int64_t test_examples = 0;   // examples, or validation windows evaluated
  // Language models: the tokens of one example (block_size; 0 otherwise) and
  // the corpus loaded.
  int64_t tokens_per_example = 0;
  std::string data_description;
  int64_t steps_per_epoch = 0;    // per rank
  int64_t global_batch_size = 0;  // examples per step over all ranks
  std::string resumed_from;       // checkpoint path, or ""
  int64_t start_step = 0;
  int64_t start_epoch = 0;
};

struct StepInfo {
  int64_t epoch = 0;          // 0-based
  int64_t step = 0;           // optimizer steps so far in the run (1-based after the step)
  int64_t step_in_epoch = 0;  // 1-based
  int64_t steps_in_epoch = 0;
  double loss = 0;                // this step's loss (rank 0's batch)
  double samples_per_second = 0;  // over all ranks, this epoch so far
  double elapsed_seconds = 0;     // this epoch so far
  double eta_seconds = 0;         // rest of this epoch at the current rate
  bool last = false;              // the last step of the epoch or of the run
};

struct EpochStats {
  int64_t epoch = 0;      // 1-based, as printed and in the metrics
  int64_t steps = 0;      // steps of this epoch (all ranks step together)
  int64_t samples = 0;    // examples trained on in this epoch over all ranks
  double train_loss = 0;  // mean over the epoch's steps and ranks
  double test_loss = 0;
  double test_accuracy = 0;  // NaN for regression models
  double seconds = 0;        // training time of the epoch (evaluation excluded)
  double samples_per_second = 0;
  bool complete = true;  // false when max_steps ended it early
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const RunInfo& info) {}
  // Every `log_every` steps and at the last step of an epoch.
  virtual void on_step(const StepInfo& step) {}
  virtual void on_epoch_end(const EpochStats& stats) {}
  virtual void on_checkpoint(const std::string& path, int64_t step) {}
};

struct TrainResult {
  RunInfo info;
  std::vector<EpochStats> epochs;  // epochs that ended in this run
  int64_t steps = 0;               // total optimizer steps (resumed ones included)
  std::string last_checkpoint;     // "" when none was written
};

class Trainer {
 public:
  // Validates the options (InvalidArgument). For Strategy::kDdp (or kAuto in
  // a distributed environment) the group is created by run() unless given
  // here (it must then be the job's world group).
  explicit Trainer(TrainOptions options, std::shared_ptr<distributed::ProcessGroup> pg = nullptr);
  ~Trainer();

  // observer may be null; it must outlive run().
  TrainResult run(TrainObserver* observer = nullptr);

  const TrainOptions& options() const { return options_; }

 private:
  TrainOptions options_;
  std::shared_ptr<distributed::ProcessGroup> pg_;
};

// The backend `options.backend` resolves to before the group is joined:
// "auto" is mpi under mpirun without MASTER_ADDR (as
// rendezvous::env_mpirun_without_master() reads the environment) when the mpi
// backend was built; otherwise it stays "auto", which
// distributed::init_worker_group resolves from the tensors' device and the
// GPUs per local rank (native on the CPU; nccl or native on GPUs).
std::string resolve_backend(const std::string& requested, bool mpirun_without_master);

// Whether the strategy runs as several processes (ddp, pipeline, tensor).
bool is_distributed(Strategy strategy);

// The strategy `options.strategy` resolves to in this environment.
Strategy resolve_strategy(Strategy requested);

}  // namespace cohort::train
