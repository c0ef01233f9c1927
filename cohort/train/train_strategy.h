// TrainStrategy: how one training step runs on this rank, for each way
// `cohort train` can spread the work. The Trainer (trainer.h) owns the loop,
// the data, checkpoints and metrics and talks to the strategy only through
// this interface, so strategies are peers:
//   single    one process;
//   ddp       DistributedDataParallel over the world group;
//   dp        DataParallel replicas on threads in one process;
//   pipeline  stages of the model on the ranks of a pipeline group (x data
//             parallel replicas when the world has more ranks than stages);
//   tensor    Megatron-style tensor parallelism over the world group (Net's
//             fc1/fc2, the MLP's linear pairs, a GPT's heads, MLPs and
//             vocabulary); every rank sees the same batch.
//
// Every strategy keeps a whole model under the single-process names
// (full_model()): what checkpoints save and resume into and what evaluation
// runs, so a checkpoint of any strategy loads into any other. For the
// model-parallel strategies that model is brought up to date by
// sync_full_model() (collective) before it is read.
//
// Ownership: the strategy owns the model, its wrappers and the optimizer;
// it shares the world group. Thread safety: the training thread only.
// Errors: collective methods fail with the group's errors (peer lost,
// timeout), naming the rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/base/trace.h"
#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/core/random.h"
#include "cohort/data/dataset.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"
#include "cohort/optim/optimizer.h"
#include "cohort/parallel/joinable.h"
#include "cohort/train/train_options.h"
#include "cohort/train/workload.h"

namespace cohort::train {

class TrainStrategy {
 public:
  explicit TrainStrategy(std::shared_ptr<distributed::ProcessGroup> world)
      : world_group_(world.get()), world_(std::move(world)) {}
  virtual ~TrainStrategy() = default;

  // The whole model under single-process names (see the header comment).
  virtual nn::Module& full_model() = 0;
  // The optimizer whose state a checkpoint holds, over full_model()'s
  // parameters in their order; up to date after sync_full_model(true).
  virtual optim::Optimizer& full_optimizer() = 0;

  // How the training data is sharded: the sampler's replicas and this rank's
  // replica (data-parallel index), and the examples one step takes per replica.
  virtual int data_replicas() const = 0;
  virtual int data_rank() const = 0;
  // Whether this rank's step losses and examples count in the epoch's
  // totals: one rank per data replica (the ranks of one pipeline or of one
  // tensor-parallel group all see the same batch).
  virtual bool data_rank_counts() const { return true; }

  // One optimizer step on this rank's batch: zero_grad, forward, loss,
  // backward, gradient clipping, step. `check` sees the loss as soon as it is
  // known (it throws to stop a diverged run). Returns the step's loss as the
  // Trainer reports it (this replica's batch).
  virtual double step(const data::Batch& batch, const std::function<void(double)>& check) = 0;
  // What a Join (parallel/join.h) wraps when ranks hold different numbers of
  // batches (--drop-last false), in its order; empty: this strategy cannot
  // train them.
  virtual std::vector<parallel::Joinable*> joinables() { return {}; }

  // Collective: full_model() (and, with optimizer, full_optimizer()) holds
  // the current state on every rank that reads it (all ranks for the model,
  // rank 0 for the optimizer). Nothing to do for replicated strategies.
  virtual void sync_full_model(bool optimizer) {}
  // Called on every rank after a checkpoint was loaded into full_model() and
  // full_optimizer(): hands the state to the parts that train.
  virtual void after_resume() {}

  // Sharded checkpoints (--checkpoint-format sharded): whether this strategy
  // writes them, this rank's pieces of full_model()'s and full_optimizer()'s
  // state (checkpoint/sharded_checkpoint.h names; no communication), and
  // loading this rank's part straight from a checkpoint of any world size
  // (false: not supported; the Trainer then loads the whole checkpoint into
  // full_model() and calls after_resume()).
  virtual bool writes_sharded_checkpoints() const { return false; }
  virtual std::vector<checkpoint::ShardPiece> checkpoint_pieces() { return {}; }
  virtual bool load_checkpoint_part(const checkpoint::CheckpointSource& source) { return false; }

  // Whether this rank runs the training loop; a rank that does not (a
  // parameter server) calls serve() instead, which returns when the job's
  // trainers are done.
  virtual bool runs_loop() const { return true; }
  virtual void serve() {}
  // Called on the loop's ranks when the loop has ended (all epochs or
  // max_steps), before the run returns.
  virtual void on_train_end() {}
  // The group of the ranks that run the loop (totals, evaluation and
  // checkpoints are collective over it; its rank 0 reports and writes);
  // null in one process.
  virtual distributed::ProcessGroup* loop_group() { return world_group_; }
  // Whether this rank reports progress, writes checkpoints and metrics:
  // rank 0 of the loop group (or the only process). A strategy whose
  // ranks run the loop without a group (loop_group() null on several
  // processes) names one.
  virtual bool is_main_rank() {
    distributed::ProcessGroup* g = loop_group();
    return g == nullptr || g->rank() == 0;
  }

  // Intra-op threads per process (per replica for dp) and DP replicas.
  virtual int threads() const = 0;
  virtual int replicas() const { return 1; }
  // How the model is split, for the start-up line ("" when it is not).
  virtual std::string layout() const { return ""; }

  // Where step() records its phases (forward, backward, optimizer); null:
  // nowhere. Set by make_strategy.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 protected:
  Tracer* tracer() const { return tracer_; }

 private:
  distributed::ProcessGroup* world_group_;
  std::shared_ptr<distributed::ProcessGroup> world_;  // kept alive for loop_group()
  Tracer* tracer_ = nullptr;
};

// Builds the strategy `strategy` (resolved, never kAuto) for `options`,
// initialising the model from gen. `world` is the job's group (null for
// single and dp). tracer: where the strategy records (may be null; must
// outlive the strategy).
std::unique_ptr<TrainStrategy> make_strategy(const TrainOptions& options, Strategy strategy,
                                             std::shared_ptr<distributed::ProcessGroup> world,
                                             Generator& gen, Tracer* tracer = nullptr);

}  // namespace cohort::train
