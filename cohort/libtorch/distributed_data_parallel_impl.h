// The state behind cohort::libtorch::DistributedDataParallel, shared by its
// two source files: distributed_data_parallel.cc (buckets, hooks, the
// reduction) and distributed_data_parallel_join.cc (unused parameters' .grad,
// the Join's shadow of an iteration). Internal to the implementation, not
// part of the adapter's API.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cohort/libtorch/distributed_data_parallel.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::libtorch {

using Clock = std::chrono::steady_clock;

namespace detail {

bool ignored(const std::vector<std::string>& ignore, const std::string& name);
// The entries parallel::verify_same_entries compares, in the form
// parallel::model_entries writes for cohort's modules.
std::vector<std::string> model_entries(const torch::nn::Module& module,
                                       const std::vector<std::string>& ignore);
// Collective: rank `root`'s values of `tensors` on every rank, one broadcast
// per dtype and device (the flat copy lives where its tensors do).
void broadcast_coalesced(const ProcessGroup& pg, const std::vector<at::Tensor>& tensors,
                         int root = 0);

}  // namespace detail

struct DistributedDataParallel::Impl {
  struct Param {
    std::string name;
    at::Tensor tensor;
    at::Tensor view;  // the bucket slice, shaped like the parameter
    size_t bucket = 0;
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t hook_key = 0;
  };
  struct Bucket {
    at::Tensor buffer;
    std::vector<size_t> params;
    DataType dtype = DataType::kFloat32;
    Clock::time_point launched;
  };

  ProcessGroup pg;
  DistributedDataParallelOptions options;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::mutex mu;
  // After buckets: goes first, waiting for what still writes into them.
  std::unique_ptr<parallel::ReductionScheduler> scheduler;
  ReductionTrace trace, last_trace;
  // find_unused_parameters, as cohort's reducer (parallel/reducer.h): since
  // the last synchronised step, whether each .grad was defined when it began
  // and the values of those marked unused (restored if no rank used them).
  bool window_open = false;
  std::vector<bool> had_grad;
  std::vector<std::pair<size_t, at::Tensor>> kept;
  bool end_queued = false;
  bool shadowing = false;  // a Join's shadow of the others' backward
  std::optional<parallel::JoinCount> join_count;
  parallel::CommHookPtr hook;  // registered; null: all_reduce(average) below

  void build_buckets(size_t cap_bytes);
  void make_scheduler();
  at::Tensor& grad_of(Param& p) { return p.tensor.mutable_grad(); }
  void restore_view(Param& p);
  void begin_iteration();
  void reset_iteration();
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);
  void on_grad_ready(size_t index);
  void on_backward_end();
  void keep_if_unused(size_t index);
  void restore_unused(const std::vector<uint8_t>& global_used);
  void shadow_reduction();
  void on_ready(size_t index);
  parallel::BucketReduction launch(size_t i);
  parallel::BucketReduction launch_hook(size_t i);
  void set_hook(parallel::CommHookPtr h);
  void finalize();
};

}  // namespace cohort::libtorch
