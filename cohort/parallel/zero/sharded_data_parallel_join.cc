// ShardedDataParallel as a Joinable (sharded_data_parallel.h, join.h): the
// shadow of an iteration on a rank out of inputs, the divisor of
// divide_by_initial_world_size = false, and stage 3's record of the shard
// group's collectives that the shadow replays.
#include "cohort/parallel/join.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel {

int ShardedDataParallel::buffer_authority(bool candidate) {
  // Under a Join rank 0 may have run out: the highest rank still training
  // holds the current buffers.
  Tensor r = Tensor::full({1}, candidate ? pg_->rank() : -1, DType::kInt64, join_device());
  pg_->all_reduce(r, {.op = distributed::ReduceOp::kMax});
  return static_cast<int>(r.cpu().item<int64_t>());
}

double ShardedDataParallel::take_join_scale() {
  if (!join_count_) return join_scale_;
  // Issued before this iteration's reductions, so done by now or soon.
  join_count_->work.wait();
  const double training = join_count_->count.cpu().item<float>();
  join_count_.reset();
  if (training > 0) join_scale_ = pg_->size() / training;
  return join_scale_;
}

void ShardedDataParallel::join_shadow_iteration() {
  if (will_sync_buffers()) sync_buffers(buffer_authority(false));
  Tensor flag = Tensor::zeros({1}, DType::kFloat32, join_device());
  pg_->all_reduce(flag, {.op = distributed::ReduceOp::kSum});
  const float code = flag.cpu().item<float>();
  const bool sync = code > 0;
  require_forward_param_sync_ = sync;
  join_count_.reset();
  join_scale_ = 1.0;
  if (sync && !join_options().divide_by_initial_world_size && join()->ranks_training() > 0)
    join_scale_ = static_cast<double>(pg_->size()) / join()->ranks_training();
  if (options_.stage == 3) {
    shadow_stage3(code != 0, sync);
    return;
  }
  if (!sync) return;
  // This rank's gradients count as zeros; its shard receives the others'
  // average, for its optimizer's step (ShardedOptimizer's shadow).
  zero_grad_shards();
  scheduler_->reset();
  reduce_gradients();
}

void ShardedDataParallel::join_finish(bool is_last_joiner) {
  if (!options_.broadcast_buffers || pg_->size() == 1 || module_->buffers().empty()) return;
  // The parameters are the same everywhere after each step's all_gather
  // (stage 3: each rank stepped its own segments, the shadows included);
  // the buffers are the last rank's to run out.
  Tensor r = Tensor::full({1}, is_last_joiner ? pg_->rank() : -1, DType::kInt64, join_device());
  pg_->all_reduce(r, {.op = distributed::ReduceOp::kMax});
  sync_buffers(static_cast<int>(r.cpu().item<int64_t>()));
}

// ---- stage 3: record and replay ----

void ShardedDataParallel::record(bool reduce, size_t index) {
  if (recording_) recorded_.push_back({reduce, index});
}

void ShardedDataParallel::note_accumulated(size_t group) {
  // No reduce_scatter under no_sync: the place it would have had, which is
  // once every group before it is complete too (the scheduler launches in
  // order).
  if (!recording_ || group >= accumulated_.size()) return;
  accumulated_[group] = true;
  while (accumulated_next_ < accumulated_.size() && accumulated_[accumulated_next_])
    record(true, accumulated_next_++);
}

void ShardedDataParallel::end_recording() {
  if (!recording_) return;
  shadow_backward_ = std::move(recorded_);
  recorded_.clear();
  recording_ = false;
}

void ShardedDataParallel::shadow_gather(size_t ui) {
  // The others' gather of this unit, with this rank's segment. Waiting at
  // once is safe: every rank issues the group's collectives in this order.
  Unit& u = units_[ui];
  Tensor recv = Tensor::empty({u.layout.total_numel()}, u.shard.dtype(), device_);
  try {
    shard_pg_->all_gather_into_tensor(recv, u.shard);
  } catch (...) {
    std::rethrow_exception(distributed::detail::with_context(
        std::current_exception(),
        fmt::format("ShardedDataParallel (Join): the shadow of the all_gather of unit '{}'",
                    u.name)));
  }
  traffic_.all_gather_bytes += recv.nbytes();
}

void ShardedDataParallel::shadow_stage3(bool grad, bool sync) {
  if (!shadow_forward_ || (grad && !shadow_backward_)) {
    throw NotSupported(fmt::format(
        "ShardedDataParallel (rank {}): under ZeRO stage 3 a rank out of inputs replays the "
        "all_gathers and reduce_scatters of its own last {}, and this rank ran out of inputs "
        "before it ran one: give every rank at least one batch (or use stage 1 or 2)",
        pg_->rank(), grad ? "forward and backward" : "forward"));
  }
  for (const ShadowEvent& e : *shadow_forward_)
    if (!e.reduce) shadow_gather(e.index);
  if (!grad) return;
  if (sync) {
    // This rank's gradients count as zeros; its segments receive the others'
    // average, for its optimizer's step.
    zero_grad_shards();
    scheduler_->reset();
    scheduler_->arm();
  }
  bool done = false;
  for (const ShadowEvent& e : *shadow_backward_) {
    if (!e.reduce) {
      shadow_gather(e.index);
      continue;
    }
    if (!sync) continue;
    for (size_t k : units_[reduce_order_[e.index]].params)
      if (params_[k].tensor.requires_grad() && scheduler_->mark_ready(k)) done = true;
  }
  if (!sync) return;
  if (!done) done = scheduler_->mark_all_ready();
  if (done) finalize_backward();
}

}  // namespace cohort::parallel
