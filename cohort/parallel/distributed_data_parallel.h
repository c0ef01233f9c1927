// DistributedDataParallel: data-parallel training over processes, as
// torch.nn.parallel.DistributedDataParallel. Every rank holds a full copy of
// the model and trains on its own share of the data; backward averages the
// gradients over the ranks, so after opt.step() every copy is the same.
//
//   auto pg = cohort::distributed::init_process_group("native", "env://");
//   auto model = std::make_shared<Net>(gen);
//   cohort::parallel::DistributedDataParallel ddp(model, pg);
//   cohort::optim::SGD opt(ddp.parameters(), {.lr = 0.01});
//   for (...) {
//     opt.zero_grad();
//     Tensor loss = nll_loss(ddp.forward(x), y);
//     loss.backward();   // gradients are averaged when this returns
//     opt.step();
//   }
//
// Construction (collective: every rank constructs its DDP in the same order)
// checks that every rank wraps the same model -- the same parameters and
// buffers with the same names, dtypes and shapes, compared through an
// all_gather of a hash, then of the full lists when they differ -- and throws
// InvalidArgument naming the first difference and the ranks on every rank;
// then broadcasts the parameters and buffers from rank 0. A rank that dies or
// never arrives makes the others fail with the ProcessGroup's PeerLost or
// TimeoutError (the group's timeout), never hang.
//
// Gradients: see reducer.h (buckets in reverse registration order, launched
// during backward as they fill, .grad views into the buckets, no copies).
// Reduction is finished when backward() returns. Buffers (e.g. BatchNorm
// statistics) are broadcast from rank 0 at the start of a forward when the
// previous forward was a synchronised one (PyTorch's
// require_forward_param_sync: the first forward, and the first of each
// no_sync accumulation window; broadcast_buffers). no_sync() skips the
// averaging for forwards run inside it (gradient accumulation): the next
// synchronised backward averages the accumulated sum.
//
// Forward: forward(x), forward_with(fn) for any call that returns one
// tensor, forward_outputs(fn) for several (a tuple's or a named map's values,
// some of which may stay out of the loss: with find_unused_parameters the
// parameters behind those get no gradient, as in PyTorch). A module with no
// parameter that requires grad is refused; params_and_buffers_to_ignore
// (PyTorch's _set_params_and_buffers_to_ignore_for_model) leaves those out
// of the model check, the broadcasts and the reduction.
//
// Uneven inputs: DDP is a Joinable (join.h). Under a Join a rank out of
// batches shadows the others' buffer broadcasts and gradient reductions
// with zeros; the divisor follows divide_by_initial_world_size; at the end
// the model of the last rank to run out is broadcast to all.
//
// The wrapped module is child "module" (state_dict keys "module.fc1.weight",
// as PyTorch's); module() gives the model itself for saving or evaluation.
// Ownership: shares the module and the group. Not copyable or movable (the
// gradient hooks point at it); clone()/replicate() throw NotSupported.
// Thread safety: one training thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"
#include "cohort/parallel/joinable.h"
#include "cohort/parallel/model_check.h"
#include "cohort/parallel/reducer.h"

namespace cohort::parallel {

struct DistributedDataParallelOptions {
  // MiB per bucket (PyTorch's bucket_cap_mb). Unset: an eighth of the
  // model's gradient bytes, within [1, 25] MiB (auto_bucket_cap_bytes), so a
  // model smaller than PyTorch's 25 MiB default still has buckets to reduce
  // while backward runs (one 25 MiB bucket would start only at its end).
  std::optional<double> bucket_cap_mb;
  // Walk the autograd graph after each forward and treat parameters it does
  // not reach as ready (their gradient is not averaged in; see reducer.h).
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // broadcast buffers from rank 0 every forward
  // The dtype gradients are all-reduced in when comm_hook is empty: float32
  // (allreduce_hook(), the default, as Megatron), bfloat16 or float16 (half
  // the bytes on the wire: grad_reduce_hook, comm_hooks/compression_hooks.h).
  // Other than float32 it registers that hook, so it excludes comm_hook and
  // register_comm_hook (InvalidArgument).
  DType reduce_dtype = DType::kFloat32;
  // Registered at construction (comm_hooks/comm_hook.h); empty: the default
  // all_reduce until register_comm_hook.
  CommHookPtr comm_hook = {};
  // Records each bucket's reduction (see ReducerOptions::tracer); must
  // outlive the DistributedDataParallel.
  Tracer* tracer = nullptr;
  // Fully-qualified names ("fc1.weight", "bn.running_mean") DDP leaves alone;
  // a name that is neither a parameter nor a buffer is refused.
  std::vector<std::string> params_and_buffers_to_ignore = {};
};

// The bucket size DDP takes when bucket_cap_mb is unset, for gradients of
// `gradient_bytes` in all.
size_t auto_bucket_cap_bytes(size_t gradient_bytes);

class DistributedDataParallel : public nn::Module, public Joinable {
 public:
  DistributedDataParallel(nn::ModulePtr module, std::shared_ptr<distributed::ProcessGroup> pg,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;

  // module->forward(input), with the buffer broadcast before it and the
  // reduction armed after it (when grad mode is on and not in no_sync).
  Tensor forward(const Tensor& input) override;
  // The same around any call of the module (several inputs, other methods):
  // fn(module()) must return the outputs that the loss is computed from.
  Tensor forward_with(const std::function<Tensor(nn::Module&)>& fn);
  // The same for a call with several outputs (e.g. a tuple's elements, or a
  // named map's values in a fixed order).
  std::vector<Tensor> forward_outputs(const std::function<std::vector<Tensor>(nn::Module&)>& fn);
  // And for a call that returns named outputs (PyTorch's dict outputs).
  std::map<std::string, Tensor> forward_named_outputs(
      const std::function<std::map<std::string, Tensor>(nn::Module&)>& fn);

  // RAII: forwards run while it lives do not average gradients on backward.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.require_sync_) {
      ddp_.require_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  // auto guard = ddp.no_sync();  ... forward/backward ...  (guard ends)
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // PyTorch's register_comm_hook(state, hook), the state inside the hook
  // object (e.g. powersgd_hook({.matrix_approximation_rank = 2})): once per
  // DDP (a second throws InvalidArgument, as PyTorch 1.13), between
  // iterations, the same hook on every rank.
  void register_comm_hook(CommHookPtr hook) { reducer_->set_comm_hook(std::move(hook)); }

  nn::Module& module() const { return *module_; }
  const nn::ModulePtr& module_ptr() const { return module_; }
  distributed::ProcessGroup& process_group() const { return *pg_; }
  const Reducer& reducer() const { return *reducer_; }

  // Joinable (join.h).
  void join_shadow_iteration() override;
  void join_finish(bool is_last_joiner) override;
  distributed::ProcessGroup& join_process_group() override { return *pg_; }
  Device join_device() const override;

 protected:
  nn::ModulePtr copy_shell() const override;

 private:
  bool will_sync_buffers() const;
  void sync_buffers(int root);
  int buffer_authority(bool candidate);
  void before_forward();
  void after_forward(const std::vector<Tensor>& outs);
  std::vector<Tensor> synced_buffers() const;

  nn::ModulePtr module_;
  std::shared_ptr<distributed::ProcessGroup> pg_;
  DistributedDataParallelOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool require_sync_ = true;
  // Whether the previous forward synchronised (PyTorch's
  // require_forward_param_sync): this forward then broadcasts the buffers.
  bool require_forward_param_sync_ = true;
  distributed::Work sync_flag_work_;  // the Join's "will this backward sync" exchange
  Tensor sync_flag_;
};

}  // namespace cohort::parallel
