// ShardedDataParallel: ZeRO stages 1, 2 and 3 (stage 3 is PyTorch's FSDP).
// Data parallel like DistributedDataParallel, but the model state that DDP
// keeps whole on every rank is split over the N ranks:
//   stage 1: the optimizer state (each rank updates 1/N of every tensor);
//   stage 2: + the gradients (each rank keeps only its averaged 1/N);
//   stage 3: + the parameters (gathered for a unit's forward and again for
//            its backward, freed after use).
//
//   auto model = std::make_shared<GPT>(cfg, gen);
//   ShardedDataParallel zero(model, pg, {.stage = 3, .unit_policy =
//   module_type_policy({"Block"})}); ShardedOptimizer opt(zero,
//   std::make_unique<optim::AdamW>(zero.shard_parameters(), o)); for (...) {
//     opt.zero_grad();
//     zero.forward_with([&](nn::Module& m) { return gpt_loss(m, x, y); }).backward();
//     opt.clip_grad_norm(1.0);   // global norm over the shards
//     opt.step();                // updates this rank's shards; stages 1, 2: all_gather
//   }
//
// Units: the model is cut into units (ZeroOptions::unit_policy picks
// submodules; the parameters outside every unit form the root unit). Each
// unit has one flat layout (flat_layout.h, shared with DDP's buckets): every
// tensor padded to a multiple of N and laid out rank-major, so that the
// gradients of a unit are one reduce_scatter (average) into this rank's
// segment and its parameters one all_gather of the segments. This rank owns
// chunk `rank` of every tensor: shard_parameters() are those chunks, 1-d
// tensors (empty when a tensor has fewer than rank + 1 chunks' worth of
// elements), leaves whose .grad is the averaged gradient of that chunk after
// backward. Build any optimizer over them (param groups: shard_of(param)).
//
// Overlap: a unit's reduce_scatter starts from the grad-ready hook of its
// last gradient, while backward goes on; units are launched in a fixed order
// (reverse unit order, root last), at most two in flight (launching a third
// first waits for the oldest: their buffers are a unit's gradients each),
// and the last launch waits for all, so when backward() returns the shard
// gradients are final (as DDP's reducer).
// Stage 3: before a unit's forward its all_gather is waited for and the next
// unit's (in the previous forward's order) is issued; in backward the unit's
// parameters are gathered again when the gradient of its output arrives and
// the unit before it is prefetched; at most two units are gathered at a time
// beside the root unit. A gathered unit's parameters live in one of two
// resident gather buffers (the root unit in a third), reused from unit to unit
// and kept between steps (ZeroOptions::resident_gather_buffers); freeing a
// unit points its storage back at its own block, whose pages are given back
// to the OS (madvise) and read as zeros. The storage object stays the same
// either way (the autograd graph holds views of it). A unit with frozen
// parameters is freed only at the end of backward (its frozen weights may be
// read after its last gradient is ready). Stage 3 needs the units' forwards
// to be called through the call operators (module(x), a Child's fc1_(x),
// Sequential), which run the forward hooks (nn/module.h); a unit entered by a
// direct forward() call is named in an InvalidArgument after forward.
//
// Devices: the model's parameters live on one device (a CUDA model is moved
// there before wrapping), and every buffer -- gradient shards, the units'
// flat buffers, gather buffers -- is made on it; the collectives take them as
// device tensors (nccl enqueues them on its stream, other backends stage them
// through host memory). Under stage 3 on a device, a freed unit's own block
// stays allocated (the CPU gives its pages back to the OS; device memory has
// no such call), so the parameter memory saved is that of the gather buffers
// only; gradient and optimizer-state sharding save as on the CPU.
//
// Options beyond the stages: gradients reduce-scattered in bf16
// (ZeroOptions::reduce_dtype), gradient accumulation without a reduction per
// micro-batch (no_sync()), and HSDP -- sharded within groups of
// hybrid_shard_size ranks, replicated across them (make_hybrid_shard_groups).
//
// Collectives are issued in the same order on every rank (the backward
// engine runs a plain graph in a deterministic order, autograd/engine.h); a
// rank that issues something else is reported by the group as a mismatch
// naming both ops (the flight recorder), never a hang.
//
// Buffers are broadcast from rank 0 on a forward that follows a synchronised
// one, as DDP's (PyTorch's require_forward_param_sync). Communication hooks
// (FSDP's register_comm_hook): comm_hooks/sharded_comm_hook.h.
// Uneven inputs: a Joinable (join.h), with the ShardedOptimizer listed
// after the model (Join({&zero, &optimizer})): a rank out of inputs shadows
// the buffer broadcast and the reduce_scatters with zero gradients, and its
// optimizer still updates its shard from the others' average (over the
// initial world size, or over the ranks still training with
// divide_by_initial_world_size = false). Under stage 3 it also shadows the
// units' all_gathers: it replays the shard group's collectives of its own
// last iteration (the gathers of its last forward, the gathers and
// reduce_scatters of its last backward), which every rank issues in the same
// order while the forward's unit order stays the same (PyTorch's FSDP has no
// Join). A rank out of inputs before its first iteration has nothing to
// replay and throws NotSupported naming it; a forward whose units run in
// another order than the shadowed rank's last one is reported by the group
// as a mismatch.
//
// Failure: as DDP -- construction verifies every rank wraps the same model
// (InvalidArgument naming the first difference) and broadcasts rank 0's
// parameters; a parameter that got no gradient keeps its unit from being
// reduced and the next forward throws naming it; group failures (PeerLost,
// TimeoutError, mismatches) propagate out of backward() or step().
// Ownership: shares the module and the group. Not copyable. Under stage 3
// the module's parameters are views of the wrapper's per-unit storage; call
// summon_full_params() before destroying the wrapper when the module is used
// afterwards (a freed unit reads as zeros; the destructor moves gathered units
// out of the gather buffers into their own blocks).
// Thread safety: one training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"
#include "cohort/parallel/comm_hooks/sharded_comm_hook.h"
#include "cohort/parallel/flat_layout.h"
#include "cohort/parallel/joinable.h"
#include "cohort/parallel/model_check.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::parallel {

// Whether the submodule at `path` (dotted, as named_modules()) is a unit.
using UnitPolicy = std::function<bool(const std::string& path, const nn::Module& module)>;
// Every direct child of the model is a unit (the default).
UnitPolicy child_unit_policy();
// Submodules whose type_name() is one of `types` (e.g. {"Block"} for the GPT).
UnitPolicy module_type_policy(std::vector<std::string> types);
// No units: the whole model is the root unit.
UnitPolicy no_unit_policy();

struct ZeroOptions {
  int stage = 3;  // 1, 2 or 3
  // Stage 3: free a unit's parameters after its forward (gather them again
  // in backward). false: keep them until its gradients are reduced (stage
  // 2's parameter traffic, more memory).
  bool reshard_after_forward = true;
  // Stage 3: issue the next unit's all_gather before the current one computes.
  bool prefetch = true;
  UnitPolicy unit_policy = {};    // empty: child_unit_policy()
  bool broadcast_buffers = true;  // buffers from rank 0 at every forward, as DDP
  // The dtype gradients are reduce-scattered in (DDP's reduce_dtype):
  // float32 (the default, as Megatron) or bfloat16: a unit's flat float32
  // gradient is rounded to bf16, reduce-scattered as a sum (the collectives
  // add in float32 and round after each step) and this rank's segment
  // widened back to float32 and divided by the world size -- half the
  // reduce_scatter bytes, about 3 significant digits. Parameters, gradient
  // shards, optimizer state and the parameters' all_gathers stay float32.
  DType reduce_dtype = DType::kFloat32;
  // HSDP (FSDP's HYBRID_SHARD): shard over groups of this many consecutive
  // ranks (a node's under `cohort run`) and replicate across them. 0 or the
  // group's size: plain ZeRO over the whole group. See make_hybrid_shard_groups.
  int hybrid_shard_size = 0;
  // Stage 3: gather units into resident buffers reused from unit to unit --
  // two the size of the largest unit, one the root unit's, allocated on first
  // use and kept until the wrapper goes (ZeroMemoryStats::gather_buffer_bytes)
  // -- instead of into each unit's own block, whose pages a free gives back to
  // the OS and the next gather faults in again (on a VM about 13 us per 4 KiB
  // page: 10 ms for a 3 MB unit, twice per step). A unit gathered while both
  // buffers are taken (reshard_after_forward false, summon_full_params(),
  // frozen units held to the end of backward) uses its own block as before.
  // false: no resident buffers; between steps nothing gathered stays resident.
  bool resident_gather_buffers = true;
};

// The 2-D grid of hybrid sharding over `pg`'s N ranks for shard size S (S
// divides N): the shard group of rank r holds ranks [r / S * S, r / S * S + S)
// (group rank r % S), the replicate group the ranks with the same r % S
// (group rank r / S). A unit's gradients are reduce-scattered in the shard
// group and this rank's segment all-reduced in the replicate group; its
// parameters are all-gathered in the shard group. S = N: the shard group is
// `pg` and replicate is null. Collective over pg (every rank creates every
// group, new_group's contract); InvalidArgument when S does not divide N.
struct HybridShardGroups {
  std::shared_ptr<distributed::ProcessGroup> shard;
  std::shared_ptr<distributed::ProcessGroup> replicate;  // null when S = N
};
HybridShardGroups make_hybrid_shard_groups(const std::shared_ptr<distributed::ProcessGroup>& pg,
                                           int shard_size);

// What this rank holds and moves, measured from the buffers themselves.
struct ZeroMemoryStats {
  size_t parameter_bytes = 0;    // persistent: full parameters (1, 2) or shards (3)
  size_t gradient_bytes = 0;     // persistent: full gradients (1) or shards (2, 3)
  size_t gather_bytes_peak = 0;  // stage 3: most bytes of gathered units at once
  int gathered_units_peak = 0;   // stage 3: most non-root units gathered at once
  // Stage 3: bytes of the resident gather buffers allocated now (kept between
  // steps; the gathered units' bytes above are held in them when they fit).
  size_t gather_buffer_bytes = 0;
  // Stages 2, 3: full gradients held now, accumulated under no_sync() and
  // not yet reduced (included in gradient_bytes); 0 otherwise.
  size_t no_sync_gradient_bytes = 0;
};

struct ZeroTrafficStats {
  // Elements x bytes passed to the group: a reduce_scatter counts its input
  // (N segments), an all_gather its output (N segments), an all_reduce twice
  // its buffer (a reduce_scatter plus an all_gather).
  uint64_t reduce_scatter_bytes = 0;
  uint64_t all_gather_bytes = 0;
  uint64_t all_reduce_bytes = 0;
  uint64_t total() const { return reduce_scatter_bytes + all_gather_bytes + all_reduce_bytes; }
};

// The ZeRO paper's per-rank model state for fp32 AdamW, in bytes, for psi
// parameter elements over `world` ranks: stage 0 (DDP) 16 psi, stage 1
// 8 psi + 8 psi / N, stage 2 4 psi + 12 psi / N, stage 3 16 psi / N.
double zero_model_state_bytes(int stage, int64_t psi, int world);
// Bytes a rank passes to the group per step (fp32): 2 psi elements for DDP
// and stages 1, 2 (all_reduce = reduce_scatter + all_gather), 3 psi for stage 3.
double zero_traffic_bytes(int stage, int64_t psi);
// The same under HSDP, `replicas` groups of `shard_size` ranks: the stage's
// traffic within the shard group plus the replicate group's all_reduce of
// this rank's gradient segment (psi / shard_size elements, counted twice as
// any all_reduce): 2 psi + 2 psi / S elements for stages 1, 2, 3 psi + 2 psi
// / S for stage 3; zero_traffic_bytes when replicas = 1. Model state: the
// zero_model_state_bytes formulas with N = S.
double hybrid_traffic_bytes(int stage, int64_t psi, int shard_size, int replicas);

// The stage a memory budget allows: the lowest-traffic stage (1, then 2,
// then 3) whose model state (the formulas above, fp32 AdamW) fits in
// `bytes_per_rank` for psi parameters over `world` ranks; `why` (optional)
// says which and why. Throws InvalidArgument when not even stage 3 fits,
// naming the smallest world size at which it would.
int choose_zero_stage(int64_t psi, int world, double bytes_per_rank, std::string* why = nullptr);

class ShardedDataParallel : public nn::Module, public Joinable {
 public:
  // Collective over pg (every rank constructs with the same model and options).
  ShardedDataParallel(nn::ModulePtr module, std::shared_ptr<distributed::ProcessGroup> pg,
                      ZeroOptions options = {});
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;

  Tensor forward(const Tensor& input) override;
  // The same around any call of the module: fn(module()) returns the output
  // the loss is computed from (or the loss).
  Tensor forward_with(const std::function<Tensor(nn::Module&)>& fn);

  // RAII, PyTorch FSDP's no_sync(): forwards run while it lives do not
  // reduce gradients on backward; each parameter's full (unsharded) gradient
  // accumulates locally in its .grad, and the first synchronised backward
  // after it reduce-scatters the accumulated sum (gradient accumulation with
  // one reduce_scatter per step instead of one per micro-batch). The cost in
  // memory: stages 2 and 3 keep the full gradients (4 bytes per fp32
  // parameter, as DDP) from the first no_sync backward until that reduction
  // (ZeroMemoryStats::no_sync_gradient_bytes); stage 1 accumulates in the
  // full gradients it keeps anyway. Stage 3 still gathers each unit for its
  // forward and backward and frees it after. Use the same pattern on every
  // rank (the reductions must line up).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(ShardedDataParallel& z) : z_(z), prev_(z.require_sync_) {
      z_.require_sync_ = false;
    }
    ~NoSyncGuard() { z_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    ShardedDataParallel& z_;
    bool prev_;
  };
  // auto guard = zero.no_sync();  ... forward/backward ...  (guard ends)
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // This rank's chunk of every trainable parameter, in named_parameters()
  // order (see the header comment); what the optimizer updates.
  std::vector<Tensor> shard_parameters() const;
  // The chunk of one of the module's parameters; InvalidArgument otherwise.
  Tensor shard_of(const Tensor& param) const;
  bool is_shard(const Tensor& t) const;

  // Zeroes the gradients this rank keeps (shards, and stage 1's full ones).
  void zero_grad_shards();
  // Stages 1, 2, for a caller that runs the module's forwards and backwards
  // itself, outside forward_with (the pipeline's micro-batches,
  // pipeline/pipeline.h): the gradients accumulated in the parameters' .grad
  // since zero_grad_shards() (undefined ones count as zeros) are
  // reduce-scattered now, unit by unit as a synchronised backward would
  // (stage 2 then drops the full gradients). Collective over the group;
  // InvalidArgument under stage 3 (its parameters are gathered by
  // forward_with) or while a forward_with iteration is pending.
  void reduce_gradients();
  // After the optimizer updated the shards: stages 1, 2 all_gather the
  // parameters (collective); stage 3 frees what is still gathered.
  void after_step();
  // PyTorch FSDP's register_comm_hook: how each unit's gradients are
  // reduce-scattered (comm_hooks/sharded_comm_hook.h). Once, before the
  // first forward; InvalidArgument under HSDP (as FSDP's hybrid strategies:
  // the replicas' all_reduce is not the hook's) and with reduce_dtype
  // bfloat16 (itself a choice of how gradients go on the wire:
  // zero_bf16_compress_hook()), and for a second hook.
  void register_comm_hook(ShardedCommHookPtr hook);
  // Stage 3: gathers every unit (collective), e.g. to read or save the full
  // parameters; they stay until the next forward frees them. Other stages: no-op.
  void summon_full_params();

  // Stage 3: after the module's full parameters were overwritten (a
  // checkpoint loaded into module()), takes this rank's segments from them.
  // Other stages: no-op (the full parameters are the ones trained).
  void load_full_params();
  // Collective: `chunk` -- a tensor shaped like the shard `shard` (this
  // rank's chunk of one parameter, e.g. an optimizer's moment of it) --
  // gathered from every rank into the full parameter's shape.
  Tensor gather_chunk(const Tensor& shard, const Tensor& chunk);
  // This rank's chunk of `full`, a tensor shaped like the parameter whose
  // shard is `shard` (a copy, 1-d). No communication.
  Tensor chunk_of(const Tensor& shard, const Tensor& full) const;
  // This rank's chunk of any of the module's parameters, trainable or frozen:
  // elements [rank c, rank c + n) of it (c = ceil(numel / N)) as a 1-d view of
  // where they are kept (stage 3: the unit's segment; else the parameter), for
  // sharded checkpoints (checkpoint/zero_checkpoint.h). InvalidArgument for a tensor
  // that is not a parameter of the module.
  Tensor local_chunk(const Tensor& param) const;
  // Elements of the parameter whose shard is `shard`.
  int64_t full_numel_of(const Tensor& shard) const { return param_of_shard(shard).tensor.numel(); }

  // Sum over the shard group of `value` (all_reduce; counted in the
  // traffic): over every rank unless HSDP, where the shard group covers each
  // parameter chunk once (what clip_grad_norm needs).
  double all_reduce_sum(double value);
  double all_reduce_max(double value);

  int stage() const { return options_.stage; }
  size_t num_units() const { return units_.size(); }
  // Unit names ("" for the root unit) and their parameter names, in unit order.
  std::vector<std::pair<std::string, std::vector<std::string>>> unit_parameter_names() const;
  const FlatLayout& unit_layout(size_t u) const { return units_[u].layout; }
  nn::Module& module() const { return *module_; }
  const nn::ModulePtr& module_ptr() const { return module_; }
  distributed::ProcessGroup& process_group() const { return *pg_; }
  // The group the parameters are sharded over (process_group() unless HSDP)
  // and the replicate group (null unless HSDP); see make_hybrid_shard_groups.
  distributed::ProcessGroup& shard_group() const { return *shard_pg_; }
  const std::shared_ptr<distributed::ProcessGroup>& replicate_group() const {
    return replicate_pg_;
  }
  ZeroMemoryStats memory_stats() const;
  const ZeroTrafficStats& traffic() const { return traffic_; }
  // Number of parameter elements (trainable and frozen), unpadded: Psi.
  int64_t num_parameter_elements() const;
  int64_t num_reductions() const { return scheduler_->num_completed(); }

  // Joinable (join.h).
  void join_shadow_iteration() override;
  void join_finish(bool is_last_joiner) override;
  // Whether the last forward (or, on a rank out of inputs, the iteration it
  // shadowed) reduces its gradients: the ShardedOptimizer's shadow steps
  // only after those, as the others step only after them.
  bool last_forward_synchronised() const { return require_forward_param_sync_; }
  distributed::ProcessGroup& join_process_group() override { return *pg_; }
  Device join_device() const override { return exchange_device(*pg_, device_); }

 protected:
  nn::ModulePtr copy_shell() const override;

 private:
  struct Param {
    std::string name;
    Tensor tensor;     // the module's parameter (stage 3: a view of its unit's `full`)
    Tensor piece;      // this rank's chunk (trainable parameters only)
    Tensor grad_view;  // stage 1: the .grad view into the unit's full_grad
    size_t unit = 0;
    size_t slot = 0;  // index in the unit's layout
    GradHookHandle hook;
  };
  struct Unit {
    std::string name;
    nn::Module* module = nullptr;  // null for the root
    std::vector<size_t> params;    // into params_, layout order
    FlatLayout layout;
    size_t trainable = 0;
    bool has_frozen = false;
    // Stage 3: natural-layout storage of the parameters, a borrowed Storage
    // pointing at `home` (the unit's own block) or, while gathered, at a
    // gather buffer (`buffer`, -1 for home).
    Tensor full;
    Tensor home;
    int buffer = -1;
    Tensor shard;       // stage 3: this rank's segment of the parameters
    Tensor grad_shard;  // stages 2, 3: this rank's averaged gradient segment
    Tensor full_grad;   // stage 1: natural-layout gradients (.grad views)
    // Stage 3 gather state.
    bool gathered = false;
    Tensor ag_recv;
    distributed::Work ag_work;
    int forward_position = -1;
    std::vector<uint64_t> hook_ids;
  };

  void build_units();
  void make_scheduler();
  void setup_stage3(Unit& u);
  void install_hooks();
  void begin_iteration();
  bool will_sync_buffers() const;
  void sync_buffers(int root);
  int buffer_authority(bool candidate);
  void on_grad_ready(size_t param_index);
  void on_unit_accumulated(size_t u);  // no_sync: a unit's gradients are all ready
  void end_accumulation();             // no_sync: every unit's are
  // Packs unit reduce_order_[n]'s gradients and starts their reduce_scatter.
  BucketReduction launch_reduce_scatter(size_t n);
  // The same through comm_hook_, `send` packed.
  BucketReduction launch_hook(size_t n, Tensor send);
  // Its reduce_scatter done: applies `recv` (HSDP: first starts the replicas'
  // all_reduce of it, a follow-up that wait_all applies).
  void finish_reduction(size_t n, Tensor recv);
  void apply_reduced(Unit& u, Tensor recv);  // into the gradient shard (stage 1: chunk)
  void finalize_backward();
  void restore_grad_view(Param& p);
  // Stage 3.
  void issue_gather(size_t u);
  void ensure_gathered(size_t u);
  void free_unit(size_t u);
  void on_unit_pre_forward(size_t u);
  void on_unit_post_forward(size_t u, Tensor& out);
  void on_unit_pre_backward(size_t u);
  void prefetch_after(size_t u, int step);
  void note_gathered();
  void bind_gather_buffer(size_t u);
  void unbind_gather_buffer(Unit& u);
  std::vector<Tensor> unit_tensors(const Unit& u) const;
  const Param& param_of_shard(const Tensor& shard) const;

  nn::ModulePtr module_;
  std::shared_ptr<distributed::ProcessGroup> pg_;
  std::shared_ptr<distributed::ProcessGroup> shard_pg_;      // pg_ unless HSDP
  std::shared_ptr<distributed::ProcessGroup> replicate_pg_;  // HSDP only
  ZeroOptions options_;
  int rank_ = 0;          // in the shard group: the segment this rank owns
  int world_ = 1;         // the shard group's size: the layouts' shards
  Device device_ = kCPU;  // the parameters' (one device; every buffer lives there)
  std::vector<Param> params_;
  std::vector<Unit> units_;  // child units in module order, then the root
  std::vector<size_t> reduce_order_;
  ZeroTrafficStats traffic_;
  ZeroMemoryStats mem_;

  // Groups: the units in reduce_order_, keys: params_ (the frozen in none).
  // At most two reductions in flight: their buffers (a unit's gradients in
  // rank-major order) are the memory that ZeRO saves elsewhere.
  std::unique_ptr<ReductionScheduler> scheduler_;
  static constexpr size_t kMaxReductionsInFlight = 2;
  bool require_sync_ = true;  // false inside no_sync()
  // Whether the previous forward synchronised: this one broadcasts the buffers.
  bool require_forward_param_sync_ = true;
  distributed::Work sync_flag_work_;  // the Join's "will this backward sync" exchange
  Tensor sync_flag_;
  // Stage 3: resident gather buffers (ZeroOptions::resident_gather_buffers).
  struct GatherBuffer {
    Tensor bytes;
    bool root = false;  // the root unit's own buffer
    int unit = -1;      // the unit held now, -1 when free
  };
  std::vector<GatherBuffer> gather_buffers_;
  static constexpr size_t kUnitGatherBuffers = 2;
  int64_t largest_unit_numel_ = 0;  // non-root units
  // Stage 3: the order units ran in the last forward, and this one's.
  std::vector<size_t> forward_order_, this_forward_;
  bool in_forward_ = false;
  bool ran_forward_ = false;
  ShardedCommHookPtr comm_hook_;  // null: the built-in reduce_scatter (reduce_dtype)

  // Join, divide_by_initial_world_size = false: the count of the ranks still
  // training, in flight until the first reduction is applied, and the factor
  // (world / count) that turns the average over the world into theirs.
  std::optional<JoinCount> join_count_;
  double join_scale_ = 1.0;
  double take_join_scale();
  // Join, stage 3: the shard group's collectives of this rank's iterations,
  // for it to replay once out of inputs (see the header comment). An event
  // is the all_gather of unit `index`, or the reduce_scatter of group
  // `index` (reduce order; under no_sync where it would have been issued).
  struct ShadowEvent {
    bool reduce = false;
    size_t index = 0;
  };
  bool recording_ = false;
  std::vector<ShadowEvent> recorded_;
  std::optional<std::vector<ShadowEvent>> shadow_forward_, shadow_backward_;
  std::vector<bool> accumulated_;  // no_sync: groups complete, for the order above
  size_t accumulated_next_ = 0;
  void record(bool reduce, size_t index);
  void note_accumulated(size_t group);
  void end_recording();
  void shadow_stage3(bool grad, bool sync);
  void shadow_gather(size_t u);
};

}  // namespace cohort::parallel
