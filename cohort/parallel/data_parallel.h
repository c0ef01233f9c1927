// DataParallel: data parallelism inside one process, as torch.nn.DataParallel,
// with the replicas running truly in parallel on threads (no GIL). On a CPU
// the "devices" are groups of cores: device_ids {0, 1} on 16 cores are two
// replicas of 8 intra-op threads each (the calling thread's budget,
// cohort::num_threads(), split as evenly as possible).
//
//   auto model = std::make_shared<Net>(gen);
//   cohort::parallel::DataParallel dp(model, 2);     // or DataParallel(model, {.device_ids={0,1}})
//   cohort::optim::SGD opt(dp.parameters(), {.lr = 0.01});
//   Tensor loss = nll_loss(dp.forward(x), y);        // x [N, ...] is split over the replicas
//   loss.backward();                                 // gradients land in model's parameters
//   opt.step();
//
// Design: replica 0 is the module itself; replicas 1..n-1 are made once by
// Module::replicate(), so their parameters ARE the module's tensors (the
// optimizer's updates are seen by every replica, nothing is copied per step)
// and every replica's backward accumulates into the same .grad, under the
// leaf's lock: the sum over the chunks is the gradient of the whole batch.
// Buffers are copied from the module into replicas 1..n-1 before every
// forward; replica 0's updates (BatchNorm running statistics) are the ones
// kept, as in PyTorch.
// forward(x): x is split along `dim` like torch.chunk (chunks of ceil(N/n),
// the last one smaller; a batch smaller than n uses only N replicas), each
// replica runs on its own thread with its own thread budget, and the outputs
// are concatenated along `dim` into one tensor. Its autograd node runs the
// replicas' backward passes in parallel on the same threads, and returns the
// gradient of x (when x requires grad) as the concatenation of the chunks'.
// Outputs and gradients equal the unwrapped module's on the whole batch up
// to float32 rounding (sums happen in a different order).
//
// Ownership: shares the module; owns the replicas and the threads.
// Thread safety: one caller at a time (like any module in training).
#pragma once

#include <memory>
#include <vector>

#include "cohort/nn/module.h"
#include "cohort/parallel/replica_pool.h"

namespace cohort::parallel {

struct DataParallelOptions {
  // One replica per entry (distinct, >= 0); empty: two replicas {0, 1}.
  std::vector<int> device_ids = {};
  // Where the gathered output "lives": must be one of device_ids (-1: the
  // first). On the CPU every device shares memory, so it only has to be valid.
  int output_device = -1;
  int64_t dim = 0;  // the batch dimension that inputs are split and outputs joined along
  // Intra-op threads per replica; 0: the constructing thread's num_threads()
  // split evenly (at least 1 each).
  int threads_per_replica = 0;
};

class DataParallel : public nn::Module {
 public:
  DataParallel(nn::ModulePtr module, DataParallelOptions options);
  DataParallel(nn::ModulePtr module, int replicas);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;

  Tensor forward(const Tensor& input) override;

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  // Intra-op threads of replica i.
  int replica_threads(int i) const { return pool_->budget(i); }
  nn::Module& module() const { return *module_; }
  const nn::ModulePtr& module_ptr() const { return module_; }
  // replica(0) is module().
  nn::Module& replica(int i) const { return *replicas_[static_cast<size_t>(i)]; }

  // Inside a replica's forward or backward: that replica's index (0 = the
  // module itself); -1 elsewhere.
  static int current_replica() { return ReplicaPool::current_replica(); }

  // torch.chunk's split of `batch` rows into at most n pieces.
  static std::vector<int64_t> chunk_sizes(int64_t batch, int n);

 protected:
  nn::ModulePtr copy_shell() const override;

 private:
  void copy_buffers(int used);

  nn::ModulePtr module_;
  DataParallelOptions options_;
  std::vector<nn::ModulePtr> replicas_;
  std::shared_ptr<ReplicaPool> pool_;
};

}  // namespace cohort::parallel
