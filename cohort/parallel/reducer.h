// Reducer: the gradient-averaging engine behind DistributedDataParallel
// (PyTorch's c10d::Reducer). It packs the gradients of the parameters into
// flat buckets and all-reduces each bucket as soon as the last of its
// gradients is ready during backward, so communication overlaps the rest of
// backward.
//
// Buckets: parameters in reverse order of registration (roughly the order in
// which backward produces their gradients), one dtype per bucket, a bucket
// closed when the next parameter would take it past bucket_cap_bytes (a single
// larger parameter gets a bucket of its own). Every rank computes the same
// assignment from the same model, and buckets are launched strictly in bucket
// order (bucket k waits for buckets 0..k-1 to be launched), so the ranks issue
// the same collectives in the same order whatever order their gradients
// arrive in.
//
// No copies: each parameter's .grad is set (Tensor::set_grad) to a view into
// its bucket (from the first forward on; a parameter without a gradient has
// none until then, as PyTorch's), so backward accumulates straight into the
// bucket and the all_reduce result is the parameter's gradient. If something replaces a
// .grad (zero_grad(set_to_none), a user's set_grad), the next forward -- or
// the grad-ready hook, if it happens in between -- copies it back into the
// bucket and restores the view.
//
// One iteration: prepare_for_backward() (from forward, when gradients are to
// be synchronised) arms the hooks; each parameter's grad-ready hook marks it
// ready; a bucket whose parameters are all ready is launched; the hook that
// launches the last bucket waits for every bucket's Work and runs the comm
// hook's finish step, so when backward() returns the gradients are averaged
// (the "finalize" point). Without prepare_for_backward (no_sync, grad mode
// off) the hooks do nothing and gradients just accumulate in the buckets.
//
// Unused parameters (find_unused_parameters): those the autograd graph
// does not reach from forward's outputs are marked ready at the first hook,
// and those still without a gradient when backward ends (an output left out
// of the loss) at its end (autograd::queue_callback); their bucket slices
// take part with their local value (zero, or what no_sync accumulated). A
// bitmap of the parameters each rank used since the last synchronised step
// is then all-reduced (max), as PyTorch's local_used_map: a parameter no
// rank used keeps the .grad it had before (undefined after
// zero_grad(set_to_none), so optimizers skip it; PyTorch's
// test_undefined_grad_parity_unused_parameters), one used somewhere gets the
// average. Without find_unused_parameters a parameter that got no gradient
// keeps its bucket from launching, and the next prepare_for_backward throws,
// naming it.
//
// Failure: a failed all_reduce propagates out of backward() with its type
// (PeerLost, TimeoutError, ...).
// The counting, ordering, waiting and naming are the ReductionScheduler's
// (reduction_scheduler.h), shared with ZeRO and the LibTorch adapter; the
// Reducer owns the buckets and the views.
// Thread safety: hooks run on the thread that runs backward; calls from
// several threads are serialised by an internal mutex.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/trace.h"
#include "cohort/core/tensor.h"
#include "cohort/distributed/process_group.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"
#include "cohort/parallel/joinable.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::parallel {

struct ReducerOptions {
  size_t bucket_cap_bytes = size_t{25} << 20;
  bool find_unused_parameters = false;
  // Set: the registered hook (register_comm_hook then refuses a second);
  // empty: allreduce_hook(), until one is registered.
  CommHookPtr comm_hook = {};
  // When set, each bucket's reduction is a span on the "comm" track (from
  // when the group started it to when it ended) and the time backward's end
  // waited for the reductions is a span on "main". Must outlive the Reducer.
  Tracer* tracer = nullptr;
};

class Reducer {
 public:
  // params: (name, tensor) in registration order; those that do not require
  // grad are left out. Installs the bucket views and the grad-ready hooks.
  Reducer(std::vector<std::pair<std::string, Tensor>> params,
          std::shared_ptr<distributed::ProcessGroup> pg, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Throws InvalidArgument if the previous synchronised iteration started its
  // reduction but did not finish it (some parameters got no gradient); then
  // makes sure every .grad is its bucket view. Called first by forward.
  void begin_iteration();
  // Arms the hooks for the coming backward. outputs: forward's outputs, used
  // to find unused parameters when find_unused_parameters is set.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  // The coming backward only accumulates (no_sync).
  void skip_sync();

  // PyTorch 1.13's register_comm_hook: once (a second, or one after
  // ReducerOptions::comm_hook, throws InvalidArgument), not null, not between
  // forward and backward; training may have started.
  void set_comm_hook(CommHookPtr hook);
  const CommHook& comm_hook() const { return *options_.comm_hook; }

  // Join (join.h), on a rank still training: this iteration's gradients are
  // averaged over the ranks `count` says still train, not over the world.
  void set_join_count(JoinCount count);
  // Join, on a rank out of inputs: one iteration's reductions with zero
  // gradients (every bucket through the comm hook, in order, then the
  // unused-parameter bitmap), matching the others' backward.
  void shadow_reduction();

  size_t num_buckets() const { return buckets_.size(); }
  // Parameter names per bucket, in reduction order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // The flat storage of bucket i (what the hooks reduce).
  const Tensor& bucket_buffer(size_t i) const { return buckets_[i].buffer; }
  // Number of synchronised backward passes finished so far.
  int64_t num_reductions() const { return scheduler_->num_completed(); }
  // Bytes the comm hooks handed to the collectives so far (BucketReduction::bytes).
  size_t reduced_bytes() const { return scheduler_->launched_bytes(); }
  bool find_unused_parameters() const { return options_.find_unused_parameters; }

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    Tensor view;  // the .grad we install: a view into the bucket
    size_t bucket = 0;
    GradHookHandle hook;
  };
  struct Bucket {
    Tensor buffer;
    std::vector<size_t> params;
    Tracer::Clock::time_point launched;  // for the trace
  };

  void build_buckets(size_t cap_bytes);
  void on_grad_ready(size_t index);
  void on_backward_end();
  BucketReduction launch(size_t i);
  void finalize();
  void keep_grad_if_unused(size_t index);
  void restore_unused_grads(const std::vector<uint8_t>& global_used);
  void trace_bucket(size_t i, const distributed::Work& w, size_t wire_bytes);
  void restore_view(Param& p);

  std::shared_ptr<distributed::ProcessGroup> pg_;
  ReducerOptions options_;
  bool hook_registered_ = false;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  // Since the last synchronised step: whether each parameter had a .grad
  // when it began, and the values of those that had one but were marked
  // unused (restored if no rank used them).
  bool window_open_ = false;
  std::vector<bool> had_grad_;
  std::vector<std::pair<size_t, Tensor>> kept_;
  bool end_queued_ = false;  // this backward's on_backward_end is queued
  bool shadowing_ = false;   // in shadow_reduction
  std::optional<JoinCount> join_count_;
  std::mutex mu_;
  // After buckets_: goes first, waiting for what still writes into them.
  std::unique_ptr<ReductionScheduler> scheduler_;
};

}  // namespace cohort::parallel
