// The strategies in which every worker holds the whole model: single, ddp, dp.
#include <memory>

#include "cohort/base/parallel.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/data_parallel.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/sync_batchnorm.h"
#include "cohort/train/replicated_strategy.h"

namespace cohort::train {

ReplicatedStrategy::ReplicatedStrategy(const TrainOptions& options, Strategy strategy,
                                       std::shared_ptr<distributed::ProcessGroup> world,
                                       Generator& gen, Tracer* tracer)
    : TrainStrategy(world), options_(options), world_(std::move(world)) {
  model_ = make_model(options, gen);
  // Initialised on the CPU (the same weights for a seed on every device),
  // then moved, before the optimizer sees the parameters.
  model_->to(options.device);
  params_ = model_->parameters();
  optimizer_ = make_optimizer(options, params_);
  if (strategy == Strategy::kDdp) {
    // Before DDP wraps it, as in PyTorch; in place, so params_ still holds
    // the model's parameters.
    if (options.sync_batchnorm) parallel::convert_sync_batchnorm(*model_, world_);
    parallel::DistributedDataParallelOptions ddp;
    ddp.tracer = tracer;
    ddp.bucket_cap_mb = options.bucket_cap_mb;
    if (options.comm_hook) {
      // validate() let --grad-reduce bf16 through only with --comm-hook bf16: the same hook.
      ddp.comm_hook = make_comm_hook(*options.comm_hook);
    } else {
      ddp.reduce_dtype =
          options.grad_reduce == ComputePrecision::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
    }
    wrapper_ = std::make_shared<parallel::DistributedDataParallel>(model_, world_, ddp);
  } else if (strategy == Strategy::kDp) {
    auto dp = std::make_shared<parallel::DataParallel>(model_, options.replicas);
    threads_ = dp->replica_threads(0);
    replicas_ = options.replicas;
    wrapper_ = dp;
  }
  if (strategy != Strategy::kDp) threads_ = num_threads();
}

std::vector<parallel::Joinable*> ReplicatedStrategy::joinables() {
  auto* ddp = dynamic_cast<parallel::DistributedDataParallel*>(wrapper_.get());
  if (ddp == nullptr) return {};
  return {ddp};
}

int ReplicatedStrategy::data_replicas() const { return world_ ? world_->size() : 1; }

int ReplicatedStrategy::data_rank() const { return world_ ? world_->rank() : 0; }

double ReplicatedStrategy::step(const data::Batch& batch,
                                const std::function<void(double)>& check) {
  nn::Module& net = wrapper_ ? *wrapper_ : *model_;
  optimizer_->zero_grad();
  Tensor loss;
  {
    TraceSpan span(tracer(), "main", "forward", "compute");
    // To the model's device: the host side is staged through pinned memory
    // and the copy runs on the device's stream while the host goes on.
    Tensor out = net.forward(batch.input.to(options_.device));
    loss = compute_loss(options_.model, out, batch.target.to(options_.device));
  }
  const double l = loss.item<double>();
  check(l);
  {
    TraceSpan span(tracer(), "main", "backward", "compute");
    loss.backward();
  }
  TraceSpan span(tracer(), "main", "optimizer", "compute");
  if (const double clip = clip_max_norm(options_.model); clip > 0) {
    optim::clip_grad_norm(params_, clip);
  }
  optimizer_->step();
  return l;
}

}  // namespace cohort::train
