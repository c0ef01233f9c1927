// cohort::libtorch::DistributedDataParallel, the parts PyTorch's DDP
// defines beyond the reduction: the .grad of parameters no rank used (kept
// as they were), and the Join (cohort/parallel/join.h) -- a rank out of
// inputs shadows an iteration's buffer broadcast and reductions.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/libtorch/distributed_data_parallel.h"
#include "cohort/libtorch/distributed_data_parallel_impl.h"
#include "cohort/parallel/join.h"

namespace cohort::libtorch {

using detail::broadcast_coalesced;
using detail::ignored;

void DistributedDataParallel::Impl::keep_if_unused(size_t index) {
  // Copy mode leaves .grad itself alone: nothing to keep.
  if (!options.gradient_as_bucket_view || !had_grad[index] || scheduler->locally_used()[index])
    return;
  for (const auto& [k, t] : kept)
    if (k == index) return;
  at::NoGradGuard no_grad;
  kept.emplace_back(index, params[index].view.clone());
}

void DistributedDataParallel::Impl::restore_unused(const std::vector<uint8_t>& global_used) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (global_used[i] != 0) continue;
    Param& p = params[i];
    if (!had_grad[i]) {
      grad_of(p) = at::Tensor();
      continue;
    }
    for (const auto& [k, t] : kept) {
      if (k != i) continue;
      p.view.copy_(t);
      grad_of(p) = p.view;
    }
  }
}

void DistributedDataParallel::Impl::on_backward_end() {
  std::lock_guard<std::mutex> lock(mu);
  end_queued = false;
  if (!scheduler->unfinished()) return;
  try {
    for (size_t i = 0; i < params.size(); ++i)
      if (!scheduler->is_ready(i)) keep_if_unused(i);
    if (scheduler->mark_rest_unused()) finalize();
  } catch (...) {
    reset_iteration();
    throw;
  }
}

void DistributedDataParallel::Impl::shadow_reduction() {
  std::lock_guard<std::mutex> lock(mu);
  reset_iteration();
  {
    at::NoGradGuard no_grad;
    for (Bucket& b : buckets) b.buffer.zero_();
  }
  shadowing = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{shadowing};
  scheduler->arm();
  try {
    if (scheduler->mark_all_ready()) finalize();
  } catch (...) {
    reset_iteration();
    throw;
  }
}

std::vector<at::Tensor> DistributedDataParallel::synced(bool parameters) const {
  const std::vector<std::string>& ignore = impl_->options.params_and_buffers_to_ignore;
  std::vector<at::Tensor> out;
  for (const auto& item : parameters ? module_->named_parameters() : module_->named_buffers())
    if (!ignored(ignore, item.key())) out.push_back(item.value());
  return out;
}

bool DistributedDataParallel::will_sync_buffers() const {
  return require_forward_param_sync_ && impl_->options.broadcast_buffers && pg_.size() > 1 &&
         !synced(false).empty();
}

int DistributedDataParallel::buffer_authority(bool candidate) {
  // Under a Join rank 0 may have run out: the highest rank still training
  // holds the current buffers.
  at::Tensor r = at::full({1}, candidate ? pg_.rank() : -1, at::kLong);
  pg_.all_reduce(r, {.op = ReduceOp::kMax});
  return static_cast<int>(r.item<int64_t>());
}

distributed::ProcessGroup& DistributedDataParallel::join_process_group() { return *pg_.group(); }

Device DistributedDataParallel::join_device() const {
  if (pg_.group()->backend() == distributed::BackendKind::kNccl) {
    throw NotSupported(
        "DistributedDataParallel (LibTorch): Join over an nccl group is not supported; its "
        "exchanges use CPU tensors (use cohort's own DDP, or a native group)");
  }
  return kCPU;
}

void DistributedDataParallel::join_shadow_iteration() {
  if (will_sync_buffers()) broadcast_coalesced(pg_, synced(false), buffer_authority(false));
  at::Tensor flag = at::zeros({1}, at::kFloat);
  pg_.all_reduce(flag, {.op = ReduceOp::kSum});
  const bool sync = flag.item<float>() != 0;
  require_forward_param_sync_ = sync;
  if (sync) impl_->shadow_reduction();
}

void DistributedDataParallel::join_finish(bool is_last_joiner) {
  // The last rank to run out trained in every iteration: its model is
  // everyone's (PyTorch's _sync_final_model).
  at::Tensor r = at::full({1}, is_last_joiner ? pg_.rank() : -1, at::kLong);
  pg_.all_reduce(r, {.op = ReduceOp::kMax});
  std::vector<at::Tensor> state = synced(true);
  for (const at::Tensor& b : synced(false)) state.push_back(b);
  broadcast_coalesced(pg_, state, static_cast<int>(r.item<int64_t>()));
}

}  // namespace cohort::libtorch
