// cohort::libtorch::DistributedDataParallel: data-parallel training of any
// torch::nn::Module over cohort's process groups, as PyTorch's Python
// torch.nn.parallel.DistributedDataParallel (which LibTorch's C++ API lacks).
// Every rank holds a full copy of the model and trains on its own share of
// the data; backward averages the gradients over the ranks, so after
// optimizer.step() every copy is the same.
//
//   auto pg = cohort::libtorch::init_process_group("native", "env://");
//   auto model = std::make_shared<Net>();            // struct Net : torch::nn::Module
//   cohort::libtorch::DistributedDataParallel ddp(model, pg);
//   torch::optim::SGD opt(model->parameters(), 0.01);
//   for (auto& batch : *loader) {
//     opt.zero_grad();
//     auto loss = torch::nll_loss(ddp.forward(batch.data), batch.target);
//     loss.backward();   // gradients are averaged when this returns
//     opt.step();
//   }
//
// Construction (collective: every rank constructs its DDP in the same order)
// checks that every rank wraps the same model (parameter and buffer names,
// dtypes and shapes; InvalidArgument naming the first difference and the
// ranks, on every rank), then broadcasts the parameters and buffers from
// rank 0. Parameters must be dense, contiguous CPU or CUDA tensors; CUDA
// parameters get buckets on their device (one dtype and one device per
// bucket), reduced through the path of cuda_tensors.h: in place on LibTorch's
// current stream (zero copy) or through host copies (staging).
//
// Gradients (cohort's design, cohort/parallel/reducer.h): parameters that
// require grad go into flat buckets in reverse registration order (about the
// order backward produces their gradients), one dtype per bucket, a bucket
// closed at bucket_cap_mb. A post hook on each parameter's gradient
// accumulator (torch::autograd::impl::grad_accumulator) marks it ready once
// its gradient is in .grad; a bucket whose gradients are all ready is
// all-reduced (average) asynchronously on the group's thread while backward
// goes on computing the earlier layers' gradients; buckets launch in bucket
// order on every rank, so the ranks issue the same collectives in the same
// order. The hook that completes the last bucket waits for the others and
// reduces that one itself, on backward's thread (handing it to the group's
// thread only to wait for it would wake a thread that, on a rank pinned to
// one CPU, takes the CPU from this one): when backward() returns the
// gradients are averaged. With gradient_as_bucket_view
// (the default) each .grad is a tensor over its bucket's memory
// (torch::from_blob, not an autograd view, so Optimizer::zero_grad's detach_()
// and zero_() work), so backward accumulates straight into the bucket and the
// reduction writes the result in place; a .grad replaced by other code is
// copied back into the bucket at the next hook or forward. Without it the
// hooks copy .grad into the bucket and the averages back.
//
// forward(x) (or forward_with(fn) for other signatures) broadcasts rank 0's
// buffers first (broadcast_buffers; see below) and arms the hooks for the coming
// backward when grad mode is on and no no_sync() guard lives; inside no_sync
// gradients only accumulate, and the next synchronised backward averages the
// sum (gradient accumulation).
//
// find_unused_parameters: as cohort's DDP (cohort/parallel/reducer.h), the
// parameters the graph does not reach from forward's outputs, and those still
// without a gradient when backward ends (an output left out of the loss,
// found through the engine's queue_callback), are marked ready; a bitmap of
// the parameters each rank used is all-reduced, and one that no rank used
// keeps the .grad it had before (undefined after zero_grad(set_to_none): the
// optimizer skips it), as PyTorch's DDP. Without find_unused_parameters a
// parameter that got no gradient makes the next forward throw
// InvalidArgument naming it. Buffers are broadcast on a forward that follows
// a synchronised one (PyTorch's require_forward_param_sync). Uneven inputs:
// a Joinable (cohort/parallel/join.h), as cohort's DDP.
//
// Failure: a failed reduction (a lost peer, a timeout) propagates out of
// backward() with cohort's type (cohort::PeerLost naming the lost rank,
// cohort::TimeoutError, ...), never a hang (the group's timeout bounds every
// op).
// Ownership: shares the module and the group; not copyable or movable (the
// hooks point at it); removes its hooks when destroyed. Thread safety: one
// training thread.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <chrono>
#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/libtorch/process_group.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"
#include "cohort/parallel/joinable.h"

namespace cohort::libtorch {

struct DistributedDataParallelOptions {
  // MiB per bucket (PyTorch's bucket_cap_mb). Unset: an eighth of the
  // model's gradient bytes within [1, 25] MiB, as cohort's own DDP
  // (cohort::parallel::auto_bucket_cap_bytes), except that gradients that
  // would fit one bucket get a quarter of their bytes (about four buckets),
  // so that the first reductions overlap backward.
  std::optional<double> bucket_cap_mb = std::nullopt;
  // Walk the autograd graph after each forward and treat parameters it does
  // not reach as ready.
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // broadcast rank 0's buffers at every forward
  // .grad tensors over the buckets' memory (no copies); false: copy in and out.
  bool gradient_as_bucket_view = true;
  // A communication hook of cohort/parallel/comm_hooks/ (PowerSGD, fp16, ...)
  // registered at construction; empty: all_reduce(average). The hook sees
  // the buckets as cohort tensors over the same memory; CPU buckets only
  // (NotSupported otherwise).
  parallel::CommHookPtr comm_hook = {};
  // Fully-qualified names ("fc1.weight") of parameters and buffers DDP
  // leaves alone: not checked, not broadcast, not reduced (PyTorch's
  // _set_params_and_buffers_to_ignore_for_model); a name the module lacks is
  // refused.
  std::vector<std::string> params_and_buffers_to_ignore = {};
};

// One bucket's reduction in the last synchronised backward (steady clock).
struct BucketTrace {
  size_t bucket = 0;
  size_t bytes = 0;
  std::chrono::steady_clock::time_point launched;  // issued by the hook
  // When the group ran it; nullopt where the waiting thread ran it itself.
  std::optional<std::chrono::steady_clock::time_point> started, finished;
};

// The last synchronised backward as seen by the hooks.
struct ReductionTrace {
  std::chrono::steady_clock::time_point first_gradient;  // first hook of backward
  std::chrono::steady_clock::time_point last_gradient;   // last hook (all gradients computed)
  std::chrono::steady_clock::time_point all_done;        // every bucket's op completed
  std::chrono::steady_clock::time_point reduced;         // and copied back (copy mode)
  // Time spent inside the hooks (marking, bucket copies in copy mode,
  // launches), not counting the last hook's wait for the reductions.
  std::chrono::nanoseconds in_hooks{0};
  std::chrono::nanoseconds waiting{0};  // the last hook's wait for the reductions
  std::vector<BucketTrace> buckets;
};

class DistributedDataParallel : public parallel::Joinable {
 public:
  template <typename M>
  requires std::derived_from<M, torch::nn::Module> DistributedDataParallel(
      std::shared_ptr<M> module, ProcessGroup pg, DistributedDataParallelOptions options = {})
      : DistributedDataParallel(std::static_pointer_cast<torch::nn::Module>(module), std::move(pg),
                                std::move(options), forward_of(module)) {}
  // A TORCH_MODULE holder (Net net; DistributedDataParallel ddp(net, pg)).
  template <typename M>
  DistributedDataParallel(const torch::nn::ModuleHolder<M>& holder, ProcessGroup pg,
                          DistributedDataParallelOptions options = {})
      : DistributedDataParallel(holder.ptr(), std::move(pg), std::move(options)) {}
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // module->forward(input) between the buffer broadcast and arming the hooks.
  // NotSupported when the module has no forward(torch::Tensor).
  at::Tensor forward(const at::Tensor& input);
  // The same around any call: fn() runs the model and returns its output (an
  // at::Tensor, a std::vector<at::Tensor> or a std::tuple of tensors), from
  // which the loss is computed.
  template <typename Fn>
  auto forward_with(Fn&& fn) -> decltype(fn()) {
    before_forward();
    auto out = fn();
    after_forward(tensors_of(out));
    return out;
  }

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
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  std::vector<at::Tensor> parameters() const { return module_->parameters(); }
  torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const { return module_; }
  const ProcessGroup& process_group() const { return pg_; }

  size_t num_buckets() const;
  // Parameter names per bucket, in reduction order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // The flat storage of bucket i (what the hooks reduce).
  const at::Tensor& bucket_buffer(size_t i) const;
  // Bucket i's reduction in the current backward (undefined before its
  // launch, and for the last bucket, which the hook that completes it runs
  // on its own thread).
  distributed::Work bucket_work(size_t i) const;
  // PyTorch's register_comm_hook(state, hook), as cohort's own DDP
  // (parallel/distributed_data_parallel.h): once (a second, or one after
  // options.comm_hook, throws InvalidArgument), between iterations, the same
  // on every rank; NotSupported for a model with CUDA buckets.
  void register_comm_hook(parallel::CommHookPtr hook);
  // Synchronised backward passes finished so far.
  int64_t num_reductions() const;
  // Bytes handed to the collectives so far (the hooks' BucketReduction::bytes;
  // without a hook, 0: the default reduction does not count them).
  size_t reduced_bytes() const;
  ReductionTrace last_trace() const;

  // Joinable (cohort/parallel/join.h): uneven inputs, as cohort's DDP.
  void join_shadow_iteration() override;
  void join_finish(bool is_last_joiner) override;
  distributed::ProcessGroup& join_process_group() override;
  Device join_device() const override;

  struct Impl;

 private:
  using ForwardFn = std::function<at::Tensor(const at::Tensor&)>;
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, ProcessGroup pg,
                          DistributedDataParallelOptions options, ForwardFn forward);

  template <typename M>
  static ForwardFn forward_of(const std::shared_ptr<M>& module) {
    if constexpr (requires(M & m, const at::Tensor& x) {
                    { m.forward(x) } -> std::convertible_to<at::Tensor>;
                  }) {
      M* m = module.get();
      return [m](const at::Tensor& x) -> at::Tensor { return m->forward(x); };
    } else {
      return {};
    }
  }
  static std::vector<at::Tensor> tensors_of(const at::Tensor& t) { return {t}; }
  static std::vector<at::Tensor> tensors_of(const std::vector<at::Tensor>& v) { return v; }
  template <typename... T>
  static std::vector<at::Tensor> tensors_of(const std::tuple<T...>& t) {
    std::vector<at::Tensor> out;
    std::apply(
        [&](const auto&... e) {
          (
              [&] {
                if constexpr (std::is_convertible_v<decltype(e), at::Tensor>) out.push_back(e);
              }(),
              ...);
        },
        t);
    return out;
  }
  void before_forward();
  void after_forward(const std::vector<at::Tensor>& outputs);
  bool will_sync_buffers() const;
  int buffer_authority(bool candidate);
  // The module's parameters (or buffers) less the ignored ones.
  std::vector<at::Tensor> synced(bool parameters) const;

  std::shared_ptr<torch::nn::Module> module_;
  ProcessGroup pg_;
  ForwardFn forward_;
  std::unique_ptr<Impl> impl_;
  bool require_sync_ = true;
  // Whether the previous forward synchronised (PyTorch's
  // require_forward_param_sync): this forward then broadcasts the buffers.
  bool require_forward_param_sync_ = true;
  Work sync_flag_work_;  // the Join's "will this backward sync" exchange
  at::Tensor sync_flag_;
};

}  // namespace cohort::libtorch
