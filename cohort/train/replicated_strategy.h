// ReplicatedStrategy: the TrainStrategy (train_strategy.h) of single, ddp
// and dp, where every worker holds the whole model: the model itself is
// full_model(), the optimizer steps on all of it, and the wrapper (DDP or
// DataParallel, none for single) runs forward and backward.
// Thread safety: the training thread only.
#pragma once

#include <memory>
#include <vector>

#include "cohort/train/train_strategy.h"

namespace cohort::train {

class ReplicatedStrategy final : public TrainStrategy {
 public:
  // world: the job's group for ddp, null for single and dp.
  ReplicatedStrategy(const TrainOptions& options, Strategy strategy,
                     std::shared_ptr<distributed::ProcessGroup> world, Generator& gen,
                     Tracer* tracer = nullptr);

  nn::Module& full_model() override { return *model_; }
  optim::Optimizer& full_optimizer() override { return *optimizer_; }
  int data_replicas() const override;
  int data_rank() const override;
  double step(const data::Batch& batch, const std::function<void(double)>& check) override;
  int threads() const override { return threads_; }
  std::vector<parallel::Joinable*> joinables() override;
  int replicas() const override { return replicas_; }

 private:
  TrainOptions options_;
  std::shared_ptr<distributed::ProcessGroup> world_;
  nn::ModulePtr model_;
  std::vector<Tensor> params_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<nn::Module> wrapper_;  // DDP or DataParallel; null for single
  int threads_ = 1;
  int replicas_ = 1;
};

}  // namespace cohort::train
