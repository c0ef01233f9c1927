// TensorStrategy: `cohort train --strategy tensor`, Megatron-style tensor
// parallelism over the world group (parallel/tensor_parallel/): Net's
// convolutions replicated, fc1 column-parallel and fc2 row-parallel; the
// MLP's linear layers paired column/row; a GPT in Megatron's layout
// (tensor_parallel_gpt.h: heads, MLP, vocabulary-parallel embedding and
// cross-entropy). Every rank trains on the same
// batch (there is no data parallelism: the sampler has one replica) and
// computes the same loss; each rank's optimizer steps on its shards and on
// its copy of the replicated parameters (whose gradients agree on every
// rank, since the input gradient of a column-parallel layer is all-reduced).
//
// The whole model (full_model()) is the unsplit one: sync_full_model
// all-gathers the shards (and, for checkpoints, the optimizer's per-parameter
// state along the same dims); after_resume cuts a loaded full state into
// this rank's shards. Gradient clipping takes the norm over all shards.
// Thread safety: the training thread only.
#pragma once

#include <memory>
#include <vector>

#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"
#include "cohort/train/train_strategy.h"

namespace cohort::train {

class TensorStrategy final : public TrainStrategy {
 public:
  TensorStrategy(const TrainOptions& options, std::shared_ptr<distributed::ProcessGroup> world,
                 Generator& gen);

  nn::Module& full_model() override { return *full_; }
  optim::Optimizer& full_optimizer() override { return *full_opt_; }
  int data_replicas() const override { return 1; }
  int data_rank() const override { return 0; }
  bool data_rank_counts() const override { return world_->rank() == 0; }
  double step(const data::Batch& batch, const std::function<void(double)>& check) override;
  void sync_full_model(bool optimizer) override;
  void after_resume() override;
  int threads() const override;
  std::string layout() const override;

 private:
  // The layout of the optimizer's parameter opt_index (its global index).
  const parallel::ParameterLayout& opt_layout(int64_t opt_index) const;
  // The split dim of optimizer parameter `param`'s state tensor `t`, or kReplicated.
  int64_t state_split_dim(size_t param, const Tensor& t) const;

  TrainOptions options_;
  std::shared_ptr<distributed::ProcessGroup> world_;
  nn::ModulePtr full_;
  std::unique_ptr<optim::Optimizer> full_opt_;
  nn::ModulePtr split_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::vector<parallel::ParameterLayout> layouts_;  // split_'s parameters, full_'s order
  std::vector<size_t> opt_param_;                   // optimizer index -> layouts_ index
};

}  // namespace cohort::train
