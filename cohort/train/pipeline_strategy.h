// PipelineStrategy: `cohort train --strategy pipeline`. The model (as an
// nn::Sequential, workload.h; a GPT as its embedding, blocks, ln_f and tied
// head, parallel/pipeline/gpt_pipeline.h) is cut into stages over a pipeline group of
// `pipeline_stages` ranks (0: the whole world), each step's batch into
// `micro_batches`, run by the schedule `pipeline_schedule`
// (parallel/pipeline/). With more ranks than stages the world is
// replicas x stages: world rank = replica * stages + stage, each replica
// trains on its own share of the data and each stage's gradients are
// averaged over its replicas.
//
// Every rank builds the whole model from the seed (so a checkpoint of any
// strategy loads on every rank) and trains only its stages' parameters: the
// optimizer is over all of them (in make_optimizer's groups), and the others
// never get a gradient, so it skips them. A GPT's tied embedding/head weight
// is stepped on the first and the last stage alike (their gradients summed
// by the Pipeline). sync_full_model broadcasts each stage's parameters from
// its owner over the pipeline group, and gathers the optimizer's
// per-parameter state on pipeline rank 0 for checkpoints. Gradient clipping
// takes the norm over all stages.
// --zero-stage 1|2 (TrainOptions::pipeline_zero_stage): ZeRO over each
// stage's replicas (PipelineOptions::zero_stage): the stage's gradients are
// reduce-scattered over its replicas and the optimizer (same kind and
// groups) runs over this rank's shards in a ShardedOptimizer; full_optimizer()
// stays the unsharded one that checkpoints read, filled by sync_full_model
// (the shards' state gathered over the replicas, then over the pipeline) and
// handed back to the shards by after_resume.
// Thread safety: the training thread only.
#pragma once

#include <memory>
#include <vector>

#include "cohort/nn/sequential.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "cohort/parallel/zero/sharded_optimizer.h"
#include "cohort/train/train_strategy.h"

namespace cohort::train {

class PipelineStrategy final : public TrainStrategy {
 public:
  PipelineStrategy(const TrainOptions& options, std::shared_ptr<distributed::ProcessGroup> world,
                   Generator& gen);
  ~PipelineStrategy() override;

  nn::Module& full_model() override { return *full_; }
  optim::Optimizer& full_optimizer() override { return *opt_; }
  int data_replicas() const override;
  int data_rank() const override;
  bool data_rank_counts() const override;
  double step(const data::Batch& batch, const std::function<void(double)>& check) override;
  void sync_full_model(bool optimizer) override;
  void after_resume() override;
  int threads() const override;
  std::string layout() const override;

 private:
  void make_sharded_optimizer();

  TrainOptions options_;
  std::shared_ptr<distributed::ProcessGroup> world_;
  nn::ModulePtr full_;  // the plain model (a Sequential, or a GPT)
  parallel::pipeline::PipelineGrid grid_;
  std::unique_ptr<parallel::pipeline::Pipeline> pipe_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::vector<int> owner_;  // pipeline rank holding each of full_'s parameters
  // The pipeline rank holding each optimizer parameter (the optimizer's
  // global index, group by group, as its state_dict keys count).
  std::vector<int> opt_owner_;
  // --zero-stage: the optimizer over this rank's shards, and for each of its
  // parameters / groups the full optimizer's index.
  std::unique_ptr<parallel::ShardedOptimizer> zopt_;
  std::vector<size_t> zopt_param_;
  std::vector<size_t> zopt_group_;
};

}  // namespace cohort::train
