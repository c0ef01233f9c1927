#include "cohort/parallel/zero/sharded_data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/core/tensor_device_ops.h"
#include "cohort/parallel/join.h"
#include "cohort/parallel/model_check.h"

namespace cohort::parallel {
namespace {

// dst <- src, both contiguous, same size, on one device: no autograd and no
// version bump (views of these storages are saved for backward).
void copy_raw(const Tensor& dst, const Tensor& src) {
  if (dst.is_cpu()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  } else {
    copy_device(dst.device(), dst, src);
  }
}

}  // namespace

ShardedDataParallel::ShardedDataParallel(nn::ModulePtr module,
                                         std::shared_ptr<distributed::ProcessGroup> pg,
                                         ZeroOptions options)
    : nn::Module("ShardedDataParallel"),
      module_(std::move(module)),
      pg_(std::move(pg)),
      options_(std::move(options)) {
  COHORT_CHECK(module_ != nullptr, "ShardedDataParallel: module is null");
  COHORT_CHECK(pg_ != nullptr, "ShardedDataParallel: process group is null");
  COHORT_CHECK(options_.stage >= 1 && options_.stage <= 3,
               "ShardedDataParallel: stage must be 1, 2 or 3, got {}", options_.stage);
  if (!options_.unit_policy) options_.unit_policy = child_unit_policy();
  COHORT_CHECK(
      options_.reduce_dtype == DType::kFloat32 || options_.reduce_dtype == DType::kBFloat16,
      "ShardedDataParallel: reduce_dtype must be float32 or bfloat16, got {}",
      dtype_name(options_.reduce_dtype));
  if (options_.reduce_dtype == DType::kBFloat16) {
    for (const auto& [name, p] : module_->named_parameters())
      COHORT_CHECK(p.dtype() == DType::kFloat32,
                   "ShardedDataParallel: reduce_dtype bfloat16 reduces float32 gradients; "
                   "parameter '{}' is {}",
                   name, dtype_name(p.dtype()));
  }
  register_module("module", module_);
  device_ = module_device(*module_);
  for (const auto& [name, p] : module_->named_parameters())
    COHORT_CHECK(p.device() == device_,
                 "ShardedDataParallel: the parameters must live on one device; '{}' is on {}, "
                 "the first parameter on {} (move the model with .to(device) first)",
                 name, p.device().str(), device_.str());
  verify_same_model(*pg_, *module_, "ShardedDataParallel");
  broadcast_module_state(*pg_, *module_, 0);
  HybridShardGroups groups = make_hybrid_shard_groups(
      pg_, options_.hybrid_shard_size == 0 ? pg_->size() : options_.hybrid_shard_size);
  shard_pg_ = std::move(groups.shard);
  replicate_pg_ = std::move(groups.replicate);
  rank_ = shard_pg_->rank();
  world_ = shard_pg_->size();
  build_units();
  make_scheduler();
  install_hooks();
}

ShardedDataParallel::~ShardedDataParallel() {
  for (Param& p : params_) p.hook.remove();
  // Lets a reduction left half-way (an exception during backward) end
  // before its buffers go.
  scheduler_.reset();
  for (Unit& u : units_) {
    // The module may outlive the buffers: gathered parameters go home.
    if (u.buffer >= 0) {
      copy_raw(u.home, u.full);
      unbind_gather_buffer(u);
    }
    if (u.module != nullptr)
      for (uint64_t id : u.hook_ids) u.module->remove_forward_hook(id);
    if (!u.ag_work.defined()) continue;
    try {
      u.ag_work.wait();
    } catch (const std::exception&) {
      // Already reported to whoever ran forward.
    }
  }
}

nn::ModulePtr ShardedDataParallel::copy_shell() const {
  throw NotSupported(
      "ShardedDataParallel: clone()/replicate() of the ZeRO wrapper are not supported; clone "
      "module() (after summon_full_params() under stage 3) instead");
}

void ShardedDataParallel::build_units() {
  // Units: submodules the policy picks, outermost first (pre-order), none
  // inside another.
  std::vector<std::pair<std::string, nn::Module*>> chosen;
  for (auto& [path, m] : module_->named_modules()) {
    if (path.empty()) continue;
    bool inside = false;
    for (const auto& c : chosen)
      if (path.size() > c.first.size() && path.compare(0, c.first.size() + 1, c.first + ".") == 0)
        inside = true;
    if (!inside && options_.unit_policy(path, *m)) chosen.emplace_back(path, m);
  }
  std::unordered_map<const TensorImpl*, size_t> owner;
  for (size_t c = 0; c < chosen.size(); ++c)
    for (const Tensor& t : chosen[c].second->parameters()) owner.emplace(t.unsafe_impl(), c);
  std::vector<Unit> units(chosen.size() + 1);
  for (size_t c = 0; c < chosen.size(); ++c) {
    units[c].name = chosen[c].first;
    units[c].module = chosen[c].second;
  }
  for (auto& [name, t] : module_->named_parameters()) {
    auto it = owner.find(t.unsafe_impl());
    const size_t u = it == owner.end() ? chosen.size() : it->second;
    COHORT_CHECK(t.is_contiguous(), "ShardedDataParallel: parameter '{}' is not contiguous", name);
    Param p;
    p.name = name;
    p.tensor = t;
    p.unit = u;
    units[u].params.push_back(params_.size());
    params_.push_back(std::move(p));
  }
  // Drop units without parameters; renumber.
  for (Unit& u : units) {
    if (u.params.empty()) continue;
    for (size_t k : u.params) params_[k].unit = units_.size();
    units_.push_back(std::move(u));
  }
  const DType dtype = params_.empty() ? kFloat32 : params_.front().tensor.dtype();
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    std::vector<int64_t> numels;
    for (size_t j = 0; j < u.params.size(); ++j) {
      Param& p = params_[u.params[j]];
      COHORT_CHECK(p.tensor.dtype() == dtype,
                   "ShardedDataParallel: parameters must share one dtype; '{}' is {}, '{}' {}",
                   p.name, dtype_name(p.tensor.dtype()), params_.front().name, dtype_name(dtype));
      p.slot = j;
      numels.push_back(p.tensor.numel());
      if (p.tensor.requires_grad()) {
        ++u.trainable;
      } else {
        u.has_frozen = true;
      }
    }
    u.layout = FlatLayout(std::move(numels), world_);
    if (options_.stage == 3) setup_stage3(u);
    if (options_.stage == 1) {
      // Full gradients in one natural-layout buffer, each .grad a view of it
      // (the reducer's bucket form of the layout).
      std::vector<int64_t> n;
      for (size_t k : u.params) n.push_back(params_[k].tensor.numel());
      FlatLayout natural(std::move(n), 1);
      u.full_grad = Tensor::zeros({natural.total_numel()}, dtype, device_);
      for (size_t j = 0; j < u.params.size(); ++j) {
        Param& p = params_[u.params[j]];
        if (!p.tensor.requires_grad()) continue;
        p.grad_view = natural.view(u.full_grad, j, p.tensor.sizes());
        restore_grad_view(p);
      }
    } else {
      u.grad_shard = Tensor::zeros({u.layout.shard_numel()}, dtype, device_);
    }
    for (size_t k : u.params) {
      Param& p = params_[k];
      if (!p.tensor.requires_grad()) continue;
      p.piece = options_.stage == 3 ? u.layout.piece_of_segment(u.shard, p.slot, rank_)
                                    : u.layout.piece_of_tensor(p.tensor, p.slot, rank_);
      p.piece.set_requires_grad(true);
      p.piece.set_grad(options_.stage == 1
                           ? u.layout.piece_of_tensor(p.tensor.grad(), p.slot, rank_)
                           : u.layout.piece_of_segment(u.grad_shard, p.slot, rank_));
    }
    if (u.trainable > 0 && u.module != nullptr) reduce_order_.insert(reduce_order_.begin(), ui);
  }
  // The root unit (parameters outside every unit) is reduced last: its
  // embedding-like first layers get their gradients at the end of backward.
  if (!units_.empty() && units_.back().module == nullptr && units_.back().trainable > 0)
    reduce_order_.push_back(units_.size() - 1);
}

void ShardedDataParallel::make_scheduler() {
  std::vector<std::string> names;
  for (const Param& p : params_) names.push_back(p.name);
  std::vector<std::vector<size_t>> groups;
  for (size_t ui : reduce_order_) {
    groups.emplace_back();
    for (size_t k : units_[ui].params)
      if (params_[k].tensor.requires_grad()) groups.back().push_back(k);
  }
  scheduler_ = std::make_unique<ReductionScheduler>(
      std::move(names), std::move(groups),
      ReductionSchedulerOptions{
          .what = "ShardedDataParallel",
          .rank = pg_->rank(),
          .max_in_flight = kMaxReductionsInFlight,
          .twice_hint = "backward ran twice through one forward",
          .unfinished_advice = "Every trainable parameter must take part in the loss"},
      ReductionCallbacks{
          .launch = [this](size_t n) { return launch_reduce_scatter(n); },
          .on_ready =
              [this](size_t k) {
                if (options_.stage == 1) restore_grad_view(params_[k]);
              },
          .on_accumulated =
              [this](size_t n) {
                note_accumulated(n);
                on_unit_accumulated(reduce_order_[n]);
              },
          .describe =
              [this](size_t n, int stage) {
                return fmt::format(
                    "ShardedDataParallel: {} of the gradients of unit '{}' ({} of {})",
                    stage == 0 ? "reduce_scatter" : "the replicas' all_reduce",
                    units_[reduce_order_[n]].name, n, reduce_order_.size());
              }});
}

void ShardedDataParallel::setup_stage3(Unit& u) {
  // The parameters move into one natural-layout storage per unit that can be
  // emptied and refilled; this rank keeps its segment in `shard`. The
  // storage borrows the unit's own block (`home`) so that a gather can point
  // it at a resident gather buffer instead (bind_gather_buffer).
  std::vector<int64_t> n;
  for (size_t k : u.params) n.push_back(params_[k].tensor.numel());
  FlatLayout natural(std::move(n), 1);
  const DType dtype = params_[u.params.front()].tensor.dtype();
  u.home = Tensor::empty({natural.total_numel()}, dtype, device_);
  std::shared_ptr<Storage> home = u.home.storage();
  u.full = Tensor::from_storage(std::make_shared<Storage>(
                                    home->data(), u.home.nbytes(), [home](void*) {}, device_),
                                {natural.total_numel()}, {1}, 0, dtype);
  if (u.module != nullptr) largest_unit_numel_ = std::max(largest_unit_numel_, u.full.numel());
  u.shard = Tensor::zeros({u.layout.shard_numel()}, dtype, device_);
  std::vector<Tensor> tensors;
  for (size_t j = 0; j < u.params.size(); ++j) {
    Param& p = params_[u.params[j]];
    Tensor v = natural.view(u.full, j, p.tensor.sizes());
    v.copy_(p.tensor.detach());
    TensorImpl* impl = p.tensor.unsafe_impl();
    impl->storage = u.full.storage();
    impl->offset = v.storage_offset();
    impl->strides = v.strides();
    tensors.push_back(p.tensor);
  }
  u.layout.pack_segment(tensors, rank_, u.shard);
  u.gathered = true;
  free_unit(static_cast<size_t>(&u - units_.data()));
}

void ShardedDataParallel::install_hooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    if (!p.tensor.requires_grad()) continue;
    p.hook = p.tensor.register_grad_ready_hook([this, i](Tensor&) { on_grad_ready(i); });
  }
  if (options_.stage != 3) return;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    if (u.module == nullptr) continue;
    u.hook_ids.push_back(
        u.module->register_forward_pre_hook([this, ui](nn::Module&) { on_unit_pre_forward(ui); }));
    u.hook_ids.push_back(u.module->register_forward_hook(
        [this, ui](nn::Module&, Tensor& out) { on_unit_post_forward(ui, out); }));
  }
}

std::vector<Tensor> ShardedDataParallel::unit_tensors(const Unit& u) const {
  std::vector<Tensor> out;
  out.reserve(u.params.size());
  for (size_t k : u.params) out.push_back(params_[k].tensor);
  return out;
}

// ---- forward ----

Tensor ShardedDataParallel::forward(const Tensor& input) {
  return forward_with([&](nn::Module& m) { return m.forward(input); });
}

Tensor ShardedDataParallel::forward_with(const std::function<Tensor(nn::Module&)>& fn) {
  begin_iteration();
  ran_forward_ = true;
  std::optional<JoinCount> count = Join::notify_join_context(*this);
  if (will_sync_buffers()) sync_buffers(join_enabled() ? buffer_authority(true) : 0);
  const bool grad = GradMode::is_enabled();
  if (join_enabled()) {
    // Tells the ranks out of inputs whether to shadow a backward, and
    // whether it reduces: 1 it does, -1 it accumulates (no_sync), 0 none.
    sync_flag_ = Tensor::full({1},
                              !grad           ? 0.0
                              : require_sync_ ? 1.0
                                              : -1.0,
                              DType::kFloat32, join_device());
    sync_flag_work_ =
        pg_->all_reduce(sync_flag_, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
    if (grad && require_sync_ && count && !join_options().divide_by_initial_world_size)
      join_count_ = std::move(count);
  }
  require_forward_param_sync_ = grad && require_sync_;
  if (options_.stage == 3) {
    if (join_enabled()) {
      // Under a Join every forward starts with nothing gathered (not so
      // after summon_full_params, a checkpoint's), so that every iteration
      // issues the same gathers, the ones a rank out of inputs replays.
      for (size_t ui = 0; ui < units_.size(); ++ui) free_unit(ui);
    }
    recording_ = join_enabled();
    recorded_.clear();
    in_forward_ = true;
    this_forward_.clear();
    for (Unit& u : units_) u.forward_position = -1;
    if (!units_.empty() && units_.back().module == nullptr) ensure_gathered(units_.size() - 1);
    if (options_.prefetch && !forward_order_.empty()) issue_gather(forward_order_.front());
  }
  Tensor out;
  try {
    out = fn(*module_);
  } catch (...) {
    in_forward_ = false;
    recording_ = false;
    throw;
  }
  if (options_.stage == 3) {
    in_forward_ = false;
    if (recording_) {
      shadow_forward_ = std::move(recorded_);
      recorded_.clear();
      recording_ = grad;
      accumulated_.assign(reduce_order_.size(), false);
      accumulated_next_ = 0;
    }
    forward_order_ = this_forward_;
    for (const Unit& u : units_) {
      if (u.module != nullptr && u.forward_position < 0) {
        throw InvalidArgument(fmt::format(
            "ShardedDataParallel (rank {}): unit '{}' ({}) did not run through its forward hooks "
            "in this forward: its parameters were not gathered. Call it as module(x) (a Child's "
            "call operator, Sequential), or pick units whose forward is called so "
            "(ZeroOptions::unit_policy); a unit the forward does not use cannot be a unit",
            pg_->rank(), u.name, u.module->type_name()));
      }
    }
    if (!grad) {
      for (size_t ui = 0; ui < units_.size(); ++ui) free_unit(ui);
    }
  }
  // Without grad mode no backward follows: the hooks stay disarmed.
  if (grad) scheduler_->arm({}, require_sync_);
  return out;
}

bool ShardedDataParallel::will_sync_buffers() const {
  return require_forward_param_sync_ && options_.broadcast_buffers && pg_->size() > 1 &&
         !module_->buffers().empty();
}

void ShardedDataParallel::sync_buffers(int root) {
  for (Tensor& b : module_->buffers()) {
    if (b.is_contiguous()) {
      pg_->broadcast(b, {.root = root});
    } else {
      Tensor c = b.contiguous();
      pg_->broadcast(c, {.root = root});
      b.copy_(c);
    }
  }
}

void ShardedDataParallel::begin_iteration() {
  scheduler_->throw_if_unfinished();
  scheduler_->reset();
  join_count_.reset();
  join_scale_ = 1.0;
  if (options_.stage == 1)
    for (Param& p : params_)
      if (p.grad_view.defined()) restore_grad_view(p);
}

void ShardedDataParallel::restore_grad_view(Param& p) {
  // Keeps .grad the view into the unit's gradient buffer when something
  // replaced it (zero_grad(set_to_none), set_grad).
  Tensor g = p.tensor.grad();
  if (g.defined() && g.is_same(p.grad_view)) return;
  if (g.defined()) {
    p.grad_view.copy_(g);
  } else {
    p.grad_view.zero_();
  }
  p.tensor.set_grad(p.grad_view);
}

// ---- backward ----

void ShardedDataParallel::on_grad_ready(size_t index) {
  if (!scheduler_->mark_ready(index)) return;
  if (scheduler_->launching()) {
    finalize_backward();
  } else {
    end_accumulation();
  }
}

void ShardedDataParallel::on_unit_accumulated(size_t ui) {
  // no_sync: the unit's full gradients stay in .grad (accumulated by
  // autograd); under stage 3 its parameters go as after a reduction.
  if (options_.stage == 3 && !units_[ui].has_frozen) free_unit(ui);
}

void ShardedDataParallel::end_accumulation() {
  end_recording();
  if (options_.stage == 3)
    for (size_t u = 0; u < units_.size(); ++u) free_unit(u);
  scheduler_->reset();
}

BucketReduction ShardedDataParallel::launch_reduce_scatter(size_t n) {
  Unit& u = units_[reduce_order_[n]];
  const DType dtype = params_[u.params.front()].tensor.dtype();
  std::vector<Tensor> grads;
  for (size_t k : u.params) grads.push_back(params_[k].tensor.grad());
  Tensor send = Tensor::empty({u.layout.total_numel()}, dtype, device_);
  u.layout.pack(grads, send);
  // bf16 on the wire: summed there, averaged once widened (apply_reduced).
  const bool narrow = options_.reduce_dtype != dtype;
  if (narrow) send = send.to(options_.reduce_dtype);
  if (options_.stage >= 2) {
    // The full gradients are not kept.
    for (size_t k : u.params)
      if (params_[k].tensor.requires_grad()) params_[k].tensor.set_grad(Tensor());
  }
  if (options_.stage == 3 && !u.has_frozen) free_unit(static_cast<size_t>(&u - units_.data()));
  record(true, n);
  if (comm_hook_ != nullptr) return launch_hook(n, std::move(send));
  const DType wire = send.dtype();
  Tensor recv = Tensor::empty({u.layout.shard_numel()}, wire, device_);
  distributed::Work work = shard_pg_->reduce_scatter_tensor(
      recv, send, {.op = narrow ? distributed::ReduceOp::kSum : distributed::ReduceOp::kAvg},
      distributed::async_op);
  traffic_.reduce_scatter_bytes += send.nbytes();
  // The buffers live in the finish step until the reduction is done.
  return BucketReduction{std::move(work),
                         [this, n, send, recv]() mutable {
                           send = Tensor();
                           finish_reduction(n, std::move(recv));
                         },
                         0};
}

void ShardedDataParallel::finish_reduction(size_t n, Tensor recv) {
  Unit& u = units_[reduce_order_[n]];
  if (replicate_pg_ == nullptr) {
    apply_reduced(u, std::move(recv));
    return;
  }
  // HSDP: the replicas' segments, summed (bf16) or averaged (float32), while
  // backward goes on; wait_all waits and applies.
  const bool sum = recv.dtype() != params_[u.params.front()].tensor.dtype();
  distributed::Work work = replicate_pg_->all_reduce(
      recv, {.op = sum ? distributed::ReduceOp::kSum : distributed::ReduceOp::kAvg},
      distributed::async_op);
  traffic_.all_reduce_bytes += 2 * recv.nbytes();
  scheduler_->then(
      n, BucketReduction{std::move(work),
                         [this, n, recv] { apply_reduced(units_[reduce_order_[n]], recv); }, 0});
}

void ShardedDataParallel::apply_reduced(Unit& u, Tensor recv) {
  const DType dtype = params_[u.params.front()].tensor.dtype();
  const double scale = take_join_scale();
  if (recv.dtype() != dtype) {
    // A bf16 sum: widened, then averaged in float32.
    recv = recv.to(dtype);
    recv.mul_(scale / static_cast<double>(pg_->size()));
  } else if (scale != 1.0) {
    recv.mul_(scale);
  }
  if (options_.stage == 1) {
    // This rank's averaged chunk goes back into the full gradients.
    std::vector<Tensor> grads;
    for (size_t k : u.params) grads.push_back(params_[k].tensor.grad());
    u.layout.unpack_segment(recv, rank_, grads);
    u.full_grad.storage()->bump_version();
  } else {
    u.grad_shard.add_(recv);
  }
}

void ShardedDataParallel::finalize_backward() {
  end_recording();
  scheduler_->wait_all();
  if (options_.stage == 3) {
    for (size_t ui = 0; ui < units_.size(); ++ui) free_unit(ui);
  }
}

// ---- after the optimizer ----

void ShardedDataParallel::after_step() {
  if (options_.stage == 3) {
    for (size_t ui = 0; ui < units_.size(); ++ui) free_unit(ui);
    return;
  }
  // One all_gather per unit, at most two in flight (each holds a unit's
  // parameters in rank-major order until unpacked).
  struct InFlight {
    size_t unit;
    Tensor send, recv;
    distributed::Work work;
  };
  std::vector<InFlight> flight;
  std::exception_ptr error;
  auto finish_oldest = [&] {
    InFlight f = std::move(flight.front());
    flight.erase(flight.begin());
    try {
      f.work.wait();
      if (!error) units_[f.unit].layout.unpack(f.recv, unit_tensors(units_[f.unit]));
    } catch (...) {
      if (!error)
        error = distributed::detail::with_context(
            std::current_exception(),
            fmt::format("ShardedDataParallel: all_gather of the updated parameters of unit '{}'",
                        units_[f.unit].name));
    }
  };
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    Unit& u = units_[ui];
    if (u.trainable == 0) continue;
    if (flight.size() >= 2) finish_oldest();
    if (error) break;
    const DType dtype = params_[u.params.front()].tensor.dtype();
    InFlight f{ui,
               Tensor::empty({u.layout.shard_numel()}, dtype, device_),
               Tensor::empty({u.layout.total_numel()}, dtype, device_),
               {}};
    u.layout.pack_segment(unit_tensors(u), rank_, f.send);
    f.work = shard_pg_->all_gather_into_tensor(f.recv, f.send, {}, distributed::async_op);
    traffic_.all_gather_bytes += f.recv.nbytes();
    flight.push_back(std::move(f));
  }
  while (!flight.empty()) finish_oldest();
  if (error) std::rethrow_exception(error);
}

void ShardedDataParallel::zero_grad_shards() {
  for (Unit& u : units_) {
    if (u.full_grad.defined()) u.full_grad.zero_();
    if (u.grad_shard.defined()) u.grad_shard.zero_();
  }
  if (options_.stage >= 2)
    for (Param& p : params_)
      if (p.tensor.requires_grad() && p.tensor.grad().defined()) p.tensor.set_grad(Tensor());
}

void ShardedDataParallel::reduce_gradients() {
  COHORT_CHECK(options_.stage != 3,
               "ShardedDataParallel::reduce_gradients (rank {}): stage 3 gathers its parameters "
               "in forward_with, so its gradients are reduced there; use stage 1 or 2",
               pg_->rank());
  COHORT_CHECK(!scheduler_->unfinished(),
               "ShardedDataParallel::reduce_gradients (rank {}): a forward_with iteration's "
               "reduction is pending ({})",
               pg_->rank(), scheduler_->describe_unready());
  scheduler_->arm();
  // Every unit, in reduce order; finalize_backward ends it.
  if (scheduler_->mark_all_ready()) finalize_backward();
}

double ShardedDataParallel::all_reduce_sum(double value) {
  Tensor t = Tensor::from_vector<double>({value}).to(exchange_device(*shard_pg_, device_));
  shard_pg_->all_reduce(t, {.op = distributed::ReduceOp::kSum});
  traffic_.all_reduce_bytes += 2 * t.nbytes();
  return t.cpu().item<double>();
}

double ShardedDataParallel::all_reduce_max(double value) {
  Tensor t = Tensor::from_vector<double>({value}).to(exchange_device(*shard_pg_, device_));
  shard_pg_->all_reduce(t, {.op = distributed::ReduceOp::kMax});
  traffic_.all_reduce_bytes += 2 * t.nbytes();
  return t.cpu().item<double>();
}

// ---- queries ----

std::vector<Tensor> ShardedDataParallel::shard_parameters() const {
  std::vector<Tensor> out;
  for (const Param& p : params_)
    if (p.piece.defined()) out.push_back(p.piece);
  return out;
}

Tensor ShardedDataParallel::shard_of(const Tensor& param) const {
  for (const Param& p : params_) {
    if (!p.tensor.is_same(param)) continue;
    COHORT_CHECK(p.piece.defined(),
                 "ShardedDataParallel::shard_of: parameter '{}' is frozen (requires_grad false): "
                 "it has no shard to optimise",
                 p.name);
    return p.piece;
  }
  throw InvalidArgument(
      fmt::format("ShardedDataParallel::shard_of: {} is not a parameter of the wrapped {}",
                  fmt::format("{} {}", dtype_name((param).dtype()), shape_str((param).sizes())),
                  module_->type_name()));
}

bool ShardedDataParallel::is_shard(const Tensor& t) const {
  for (const Param& p : params_)
    if (p.piece.defined() && p.piece.is_same(t)) return true;
  return false;
}

std::vector<std::pair<std::string, std::vector<std::string>>>
ShardedDataParallel::unit_parameter_names() const {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const Unit& u : units_) {
    out.emplace_back(u.name, std::vector<std::string>{});
    for (size_t k : u.params) out.back().second.push_back(params_[k].name);
  }
  return out;
}

int64_t ShardedDataParallel::num_parameter_elements() const {
  int64_t n = 0;
  for (const Param& p : params_) n += p.tensor.numel();
  return n;
}

ZeroMemoryStats ShardedDataParallel::memory_stats() const {
  ZeroMemoryStats s = mem_;
  s.parameter_bytes = 0;
  s.gradient_bytes = 0;
  for (const GatherBuffer& b : gather_buffers_) s.gather_buffer_bytes += b.bytes.nbytes();
  for (const Unit& u : units_) {
    if (options_.stage == 3) {
      s.parameter_bytes += u.shard.nbytes();
    } else {
      for (size_t k : u.params) s.parameter_bytes += params_[k].tensor.nbytes();
    }
    if (u.full_grad.defined()) s.gradient_bytes += u.full_grad.nbytes();
    if (u.grad_shard.defined()) s.gradient_bytes += u.grad_shard.nbytes();
    if (options_.stage >= 2) {
      for (size_t k : u.params) {
        const Tensor& t = params_[k].tensor;
        if (t.requires_grad() && t.grad().defined()) s.no_sync_gradient_bytes += t.grad().nbytes();
      }
    }
  }
  s.gradient_bytes += s.no_sync_gradient_bytes;
  return s;
}

}  // namespace cohort::parallel
