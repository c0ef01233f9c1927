// ZeroStrategy: the TrainStrategy (train_strategy.h) of `cohort train
// --strategy zero --zero-stage 1|2|3`: data parallel over the world group
// with ZeRO (parallel/zero/sharded_data_parallel.h). The model is the full
// model under single-process names; the optimizer (make_optimizer's kind and
// groups) runs over this rank's shards. Checkpoints stay whole:
// sync_full_model gathers the parameters (stage 3) and, with optimizer, the
// optimizer state into full_optimizer(), an unsharded optimizer of the same
// kind and groups; after_resume hands a loaded checkpoint back to the
// shards, so a checkpoint of any strategy and world size resumes here.
// --checkpoint-format sharded: each rank writes its own chunks instead
// (checkpoint/zero_checkpoint.h, nothing gathered), and a resume reads
// just this rank's ranges from a checkpoint of any world size.
// --zero-stage auto picks the stage from --memory-per-rank
// (parallel::choose_zero_stage) and says why in layout(). --grad-reduce bf16
// reduce-scatters the gradients in bf16 (ZeroOptions::reduce_dtype);
// --zero-shard-size K shards over groups of K ranks and replicates across
// them (HSDP, ZeroOptions::hybrid_shard_size; --zero-stage auto then fits
// the model state over K ranks).
// Units: a GPT's Blocks, the MLP's layers; under stage 3 the other models
// are one unit (their forwards call layers directly, without forward hooks).
// Thread safety: the training thread only.
#pragma once

#include <memory>
#include <string>

#include "cohort/parallel/zero/sharded_optimizer.h"
#include "cohort/train/train_strategy.h"

namespace cohort::train {

class ZeroStrategy final : public TrainStrategy {
 public:
  ZeroStrategy(const TrainOptions& options, std::shared_ptr<distributed::ProcessGroup> world,
               Generator& gen);

  nn::Module& full_model() override { return *model_; }
  optim::Optimizer& full_optimizer() override { return *full_opt_; }
  int data_replicas() const override { return world_->size(); }
  int data_rank() const override { return world_->rank(); }
  double step(const data::Batch& batch, const std::function<void(double)>& check) override;
  void sync_full_model(bool optimizer) override;
  void after_resume() override;
  bool writes_sharded_checkpoints() const override { return true; }
  std::vector<checkpoint::ShardPiece> checkpoint_pieces() override;
  bool load_checkpoint_part(const checkpoint::CheckpointSource& source) override;
  int threads() const override;
  std::string layout() const override;
  std::vector<parallel::Joinable*> joinables() override { return {zero_.get(), opt_.get()}; }
  // For a loop of its own (fault_tolerant_model.h): the wrapper and its optimizer.
  parallel::ShardedDataParallel& zero() { return *zero_; }
  parallel::ShardedOptimizer& sharded_optimizer() { return *opt_; }

 private:
  TrainOptions options_;
  std::shared_ptr<distributed::ProcessGroup> world_;
  nn::ModulePtr model_;
  std::unique_ptr<optim::Optimizer> full_opt_;
  std::shared_ptr<parallel::ShardedDataParallel> zero_;
  std::unique_ptr<parallel::ShardedOptimizer> opt_;
  std::string why_;  // how --zero-stage auto chose
};

}  // namespace cohort::train
