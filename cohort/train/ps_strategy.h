// PsStrategy: `cohort train --strategy ps`, data parallelism through a
// parameter server (parallel/parameter_server/) instead of all-reduce. The
// first `ps_servers` ranks of the world serve (each holds a shard of the
// weights, balanced by bytes, and runs the optimizer on it); the others
// train: per step each trainer pulls the weights, runs forward and backward
// on its share of the data, clips its local gradients and pushes them. The
// mode (`ps_mode`): sync (the servers average every trainer's gradients of a
// step and take one step: DDP's result, up to clipping, which sees local
// rather than averaged gradients), ssp (each push applied on arrival; a
// trainer more than `ps_staleness` steps ahead of the slowest waits) or
// async (no waiting).
//
// In sync mode the loop (totals, evaluation, checkpoints) runs over the
// trainers' subgroup; in ssp and async each trainer runs it alone, so that a
// lost trainer breaks no collective. Trainer 0 reports and writes. A checkpoint holds the whole
// model as a single-process run saves it (pulled from the servers) and the servers' optimizer state
// mapped back to the checkpoint's parameter numbering; a resume pushes the weights and each
// server's share of the optimizer state to the servers. Ownership: the RPC agent, the server or
// client and the model. Thread safety: the training thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/parallel/parameter_server/parameter_server_client.h"
#include "cohort/parallel/parameter_server/parameter_server_service.h"
#include "cohort/train/train_strategy.h"

namespace cohort::train {

class PsStrategy final : public TrainStrategy {
 public:
  PsStrategy(const TrainOptions& options, std::shared_ptr<distributed::ProcessGroup> world,
             Generator& gen);
  ~PsStrategy() override;

  nn::Module& full_model() override { return *model_; }
  optim::Optimizer& full_optimizer() override { return *full_opt_; }
  int data_replicas() const override { return trainers_; }
  int data_rank() const override { return world_->rank() - servers_; }
  double step(const data::Batch& batch, const std::function<void(double)>& check) override;
  void sync_full_model(bool optimizer) override;
  void after_resume() override;
  bool runs_loop() const override { return world_->rank() >= servers_; }
  void serve() override;
  void on_train_end() override;
  // sync: the trainers' group. ssp/async: none -- each trainer runs the loop
  // on its own (no collective a lost trainer could break), trainer 0 reports
  // and writes checkpoints, and the reported train loss is trainer 0's.
  distributed::ProcessGroup* loop_group() override;
  bool is_main_rank() override { return world_->rank() == servers_; }
  int threads() const override;
  std::string layout() const override;

 private:
  // Per server: full_opt_'s index of each parameter of the server's optimizer, in its order.
  std::vector<std::vector<size_t>> server_orders() const;
  TrainOptions options_;
  std::shared_ptr<distributed::ProcessGroup> world_;
  int servers_;
  int trainers_;
  nn::ModulePtr model_;
  std::vector<Tensor> params_;
  std::unique_ptr<optim::Optimizer> full_opt_;  // the checkpoint's view of the servers' state
  std::shared_ptr<distributed::ProcessGroup> trainer_group_;  // null on servers
  std::shared_ptr<rpc::RpcAgent> agent_;
  std::unique_ptr<parallel::ParameterServerService> service_;  // servers
  std::unique_ptr<parallel::ParameterServerClient> client_;    // trainers
};

}  // namespace cohort::train
