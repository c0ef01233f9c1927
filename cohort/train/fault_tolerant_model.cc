#include "cohort/train/fault_tolerant_model.h"

#include <fmt/format.h>

#include "cohort/checkpoint/checkpoint.h"
#include "cohort/checkpoint/zero_checkpoint.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/train/workload.h"

namespace cohort::train {

FaultTolerantModel::FaultTolerantModel(const TrainOptions& o, Generator& gen)
    : o_(o), clip_(clip_max_norm(o.model)) {
  if (o_.strategy == Strategy::kZero) return;  // built over the replica in attach()
  model_ = make_model(o_, gen);
  opt_ = make_optimizer(o_, model_->parameters());
}

void FaultTolerantModel::attach(parallel::ReplicaManager& m) {
  replica_ = m.replica_group();
  if (o_.strategy != Strategy::kZero) return;
  // The same initial weights on every process of every replica (one seed);
  // a replacement's are overwritten by the state it receives.
  Generator gen(o_.seed);
  zero_ = std::make_unique<ZeroStrategy>(o_, replica_, gen);
  zero_->zero().register_comm_hook(m.sharded_comm_hook());
}

Tensor FaultTolerantModel::forward_backward(const data::Batch& batch) {
  Tensor loss;
  if (zero_) {
    zero_->sharded_optimizer().zero_grad();
    loss = compute_loss(o_.model, zero_->zero().forward(batch.input), batch.target);
  } else {
    opt_->zero_grad();
    loss = compute_loss(o_.model, model_->forward(batch.input), batch.target);
  }
  loss.backward();
  return loss;
}

void FaultTolerantModel::average_gradients(parallel::ReplicaManager& m) {
  if (zero_) return;  // the sharded hook did, during backward
  std::vector<Tensor> grads;
  for (Tensor& p : model_->parameters())
    if (p.requires_grad() && p.grad().defined()) grads.push_back(p.grad());
  // The replica's own average first (its processes had different samples);
  // a failure here is the replica's loss, which ends this process.
  if (replica_->size() > 1)
    for (Tensor& g : grads) replica_->all_reduce(g, {.op = distributed::ReduceOp::kAvg});
  m.all_reduce_average(grads);
}

void FaultTolerantModel::step() {
  if (zero_) {
    if (clip_ > 0) zero_->sharded_optimizer().clip_grad_norm(clip_);
    zero_->sharded_optimizer().step();
    return;
  }
  if (clip_ > 0) optim::clip_grad_norm(model_->parameters(), clip_);
  opt_->step();
}

TensorDict FaultTolerantModel::state_dict(int64_t cursor, const Generator& gen) {
  TensorDict s;
  s.merge(full_model().state_dict(), "model.");
  // Under ZeRO this process's shard of the optimizer state: the process it
  // goes to holds the same shard.
  s.merge(zero_ ? zero_->sharded_optimizer().optimizer().state_dict() : opt_->state_dict(),
          "optim.");
  s.insert("ft.cursor", Tensor::from_vector<int64_t>({cursor}));
  s.insert("ft.rng", Tensor::from_vector<uint8_t>(gen.get_state()));
  return s;
}

int64_t FaultTolerantModel::load_state_dict(const TensorDict& s, Generator& gen) {
  full_model().load_state_dict(s.sub("model."));
  if (zero_) {
    zero_->zero().load_full_params();
    zero_->sharded_optimizer().optimizer().load_state_dict(s.sub("optim."));
  } else {
    opt_->load_state_dict(s.sub("optim."));
  }
  gen.set_state(s.at("ft.rng").to_vector<uint8_t>());
  return s.at("ft.cursor").to_vector<int64_t>()[0];
}

nn::Module& FaultTolerantModel::full_model() {
  if (!zero_) return *model_;
  zero_->sync_full_model(false);
  return zero_->full_model();
}

std::string FaultTolerantModel::save_checkpoint(const std::string& root,
                                                const checkpoint::TrainingState& ts,
                                                checkpoint::AsyncCheckpointWriter* writer) {
  const checkpoint::SaveOptions so{.keep_last = o_.keep_last};
  if (zero_) {
    if (writer != nullptr)
      return writer->save_sharded(*replica_, root, zero_->checkpoint_pieces(), ts, {}, so);
    return checkpoint::save_zero_checkpoint(zero_->sharded_optimizer(), root, ts, {}, so);
  }
  // Every process of the replica holds the whole state: its first one writes.
  if (replica_->rank() != 0) return "";
  if (writer != nullptr) return writer->save(root, *model_, opt_.get(), ts, so);
  return checkpoint::save_checkpoint(root, *model_, opt_.get(), ts, so);
}

std::string FaultTolerantModel::layout() const {
  if (zero_) {
    return fmt::format("replicas of {} processes, {} inside each", replica_->size(),
                       zero_->layout());
  }
  if (replica_->size() > 1)
    return fmt::format("fault-tolerant replicas of {} processes (data parallel inside each)",
                       replica_->size());
  return "fault-tolerant replicas";
}

}  // namespace cohort::train
