// ShardedDataParallel, stage 3: gathering and freeing units' parameters,
// the forward hooks and the pre-backward identity, and the helpers that
// move between full tensors and chunks (sharded_data_parallel.h).
#include <sys/mman.h>
#include <unistd.h>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel {

namespace {

// Gives the whole pages inside t's bytes back to the OS; they read as zeros
// until written again. The address range stays valid (views keep pointing at it).
void release_pages(const Tensor& t) {
  // Device memory stays with the caching allocator (see the header).
  if (t.numel() == 0 || !t.is_cpu()) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(t.raw_data());
  const uintptr_t start = (b + page - 1) / page * page, end = (b + t.nbytes()) / page * page;
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
}

}  // namespace

// ---- stage 3: gathering ----

void ShardedDataParallel::issue_gather(size_t ui) {
  Unit& u = units_[ui];
  if (u.gathered || u.ag_work.defined()) return;
  record(false, ui);
  const DType dtype = u.shard.dtype();
  u.ag_recv = Tensor::empty({u.layout.total_numel()}, dtype, device_);
  u.ag_work = shard_pg_->all_gather_into_tensor(u.ag_recv, u.shard, {}, distributed::async_op);
  traffic_.all_gather_bytes += u.ag_recv.nbytes();
  note_gathered();
}

void ShardedDataParallel::ensure_gathered(size_t ui) {
  Unit& u = units_[ui];
  if (u.gathered) return;
  issue_gather(ui);
  try {
    u.ag_work.wait();
  } catch (...) {
    u.ag_work = distributed::Work();
    u.ag_recv = Tensor();
    std::rethrow_exception(distributed::detail::with_context(
        std::current_exception(),
        fmt::format("ShardedDataParallel: all_gather of the parameters of unit '{}'", u.name)));
  }
  bind_gather_buffer(ui);
  u.layout.unpack(u.ag_recv, unit_tensors(u));
  u.ag_work = distributed::Work();
  u.ag_recv = Tensor();
  u.gathered = true;
  note_gathered();
}

void ShardedDataParallel::free_unit(size_t ui) {
  Unit& u = units_[ui];
  if (options_.stage != 3) return;
  if (u.ag_work.defined()) {
    // A prefetch nobody used: let it end before its buffer goes.
    u.ag_work.wait();
    u.ag_work = distributed::Work();
    u.ag_recv = Tensor();
  }
  if (!u.gathered) return;
  unbind_gather_buffer(u);
  // Only has pages when the unit was gathered into its own block or written
  // while freed; on an empty range madvise costs about 2 us.
  release_pages(u.home);
  u.gathered = false;
}

void ShardedDataParallel::bind_gather_buffer(size_t ui) {
  Unit& u = units_[ui];
  if (!options_.resident_gather_buffers || u.buffer >= 0 || u.full.numel() == 0) return;
  // Called just before the unit's parameters are written, so nothing reads
  // the storage while it moves; views of it (saved for backward) follow.
  const bool root = u.module == nullptr;
  int free_buffer = -1;
  size_t count = 0;
  for (size_t b = 0; b < gather_buffers_.size(); ++b) {
    if (gather_buffers_[b].root != root) continue;
    ++count;
    // A buffer sized for another dtype's unit may be too small for this one.
    if (free_buffer < 0 && gather_buffers_[b].unit < 0 &&
        gather_buffers_[b].bytes.nbytes() >= u.full.nbytes())
      free_buffer = static_cast<int>(b);
  }
  if (free_buffer < 0) {
    // More units at once than buffers: this one stays in its own block.
    if (count >= (root ? 1 : kUnitGatherBuffers)) return;
    gather_buffers_.push_back(
        {Tensor::empty({root ? u.full.numel() : largest_unit_numel_}, u.full.dtype(), device_),
         root, -1});
    free_buffer = static_cast<int>(gather_buffers_.size() - 1);
  }
  gather_buffers_[static_cast<size_t>(free_buffer)].unit = static_cast<int>(ui);
  u.buffer = free_buffer;
  u.full.storage()->rebind(
      gather_buffers_[static_cast<size_t>(free_buffer)].bytes.storage()->data());
}

void ShardedDataParallel::unbind_gather_buffer(Unit& u) {
  if (u.buffer < 0) return;
  gather_buffers_[static_cast<size_t>(u.buffer)].unit = -1;
  u.buffer = -1;
  u.full.storage()->rebind(u.home.storage()->data());
}

void ShardedDataParallel::note_gathered() {
  size_t bytes = 0;
  int count = 0;
  for (const Unit& u : units_) {
    if (u.gathered) bytes += u.full.nbytes();
    if (u.ag_recv.defined()) bytes += u.ag_recv.nbytes();
    if (u.module != nullptr && (u.gathered || u.ag_recv.defined())) ++count;
  }
  mem_.gather_bytes_peak = std::max(mem_.gather_bytes_peak, bytes);
  mem_.gathered_units_peak = std::max(mem_.gathered_units_peak, count);
}

void ShardedDataParallel::prefetch_after(size_t ui, int step) {
  if (!options_.prefetch) return;
  const int next = units_[ui].forward_position + step;
  if (next >= 0 && next < static_cast<int>(forward_order_.size()))
    issue_gather(forward_order_[static_cast<size_t>(next)]);
}

void ShardedDataParallel::on_unit_pre_forward(size_t ui) {
  if (!in_forward_) {
    ensure_gathered(ui);  // a call outside forward_with: correct, not overlapped
    return;
  }
  Unit& u = units_[ui];
  u.forward_position = static_cast<int>(this_forward_.size());
  this_forward_.push_back(ui);
  ensure_gathered(ui);
  // The next unit of the last forward, issued before this one computes.
  if (options_.prefetch && static_cast<size_t>(u.forward_position) + 1 < forward_order_.size())
    issue_gather(forward_order_[static_cast<size_t>(u.forward_position) + 1]);
}

void ShardedDataParallel::on_unit_post_forward(size_t ui, Tensor& out) {
  if (!in_forward_) return;
  if (options_.reshard_after_forward) free_unit(ui);
  if (!GradMode::is_enabled() || !out.defined() || !out.requires_grad()) return;
  // An identity whose backward runs when the gradient of this unit's output
  // is complete, i.e. just before the unit's own backward.
  Tensor y = out.detach();
  autograd::record(y, "ZeroPreBackward", {out},
                   [this, ui](const Tensor& g, const std::vector<bool>&) {
                     on_unit_pre_backward(ui);
                     return std::vector<Tensor>{g};
                   });
  out = y;
}

void ShardedDataParallel::on_unit_pre_backward(size_t ui) {
  ensure_gathered(ui);
  // Backward runs the units in reverse: prefetch the one before.
  const int prev = units_[ui].forward_position - 1;
  if (options_.prefetch && prev >= 0 && prev < static_cast<int>(forward_order_.size()))
    issue_gather(forward_order_[static_cast<size_t>(prev)]);
}

void ShardedDataParallel::summon_full_params() {
  if (options_.stage != 3) return;
  for (size_t ui = 0; ui < units_.size(); ++ui) issue_gather(ui);
  for (size_t ui = 0; ui < units_.size(); ++ui) ensure_gathered(ui);
}

void ShardedDataParallel::load_full_params() {
  if (options_.stage != 3) return;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    if (u.ag_work.defined()) u.ag_work.wait();
    u.ag_work = distributed::Work();
    u.ag_recv = Tensor();
    u.layout.pack_segment(unit_tensors(u), rank_, u.shard);
    u.gathered = true;  // the full parameters are current
  }
}

const ShardedDataParallel::Param& ShardedDataParallel::param_of_shard(const Tensor& shard) const {
  for (const Param& p : params_)
    if (p.piece.defined() && p.piece.is_same(shard)) return p;
  throw InvalidArgument(
      fmt::format("ShardedDataParallel: a {} {} tensor is not one of shard_parameters()",
                  dtype_name(shard.dtype()), shape_str(shard.sizes())));
}

Tensor ShardedDataParallel::gather_chunk(const Tensor& shard, const Tensor& chunk) {
  const Param& p = param_of_shard(shard);
  const FlatLayout& l = units_[p.unit].layout;
  COHORT_CHECK(chunk.numel() == shard.numel(),
               "ShardedDataParallel::gather_chunk: '{}': the chunk has {} elements, the shard {}",
               p.name, chunk.numel(), shard.numel());
  const int64_t c = l.chunk(p.slot);
  Tensor send = Tensor::zeros({c}, chunk.dtype(), chunk.device());
  if (chunk.numel() > 0) send.narrow(0, 0, chunk.numel()).copy_(chunk.reshape({-1}));
  Tensor recv = Tensor::empty({c * world_}, chunk.dtype(), chunk.device());
  shard_pg_->all_gather_into_tensor(recv, send);
  traffic_.all_gather_bytes += recv.nbytes();
  return recv.narrow(0, 0, p.tensor.numel()).reshape(p.tensor.sizes()).clone();
}

Tensor ShardedDataParallel::chunk_of(const Tensor& shard, const Tensor& full) const {
  const Param& p = param_of_shard(shard);
  const FlatLayout& l = units_[p.unit].layout;
  COHORT_CHECK(full.numel() == p.tensor.numel(),
               "ShardedDataParallel::chunk_of: '{}' has {} elements, the tensor given {}", p.name,
               p.tensor.numel(), full.numel());
  const int64_t n = l.local_numel(p.slot, rank_);
  if (n == 0) return Tensor::zeros({0}, full.dtype(), full.device());
  return full.reshape({-1}).narrow(0, rank_ * l.chunk(p.slot), n).clone();
}

}  // namespace cohort::parallel
