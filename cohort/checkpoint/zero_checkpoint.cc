#include "cohort/checkpoint/zero_checkpoint.h"

#include <cstring>
#include <map>

#include "cohort/core/tensor_device_ops.h"

namespace cohort::checkpoint {
namespace {

using parallel::ShardedDataParallel;
using parallel::ShardedOptimizer;

// The optimizer's parameters in state_dict numbering (groups in order).
std::vector<Tensor> numbered_params(const optim::Optimizer& opt) {
  std::vector<Tensor> out;
  for (const optim::ParamGroup& g : opt.param_groups())
    out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

// The shape of the whole parameter behind each numbered shard.
std::vector<Shape> full_shapes(ShardedOptimizer& opt) {
  ShardedDataParallel& zero = opt.model();
  const std::vector<Tensor> shards = numbered_params(opt.optimizer());
  std::vector<Shape> out(shards.size());
  for (const auto& [name, p] : zero.module().named_parameters()) {
    if (!p.requires_grad()) continue;
    const Tensor s = zero.shard_of(p);
    for (size_t i = 0; i < shards.size(); ++i)
      if (shards[i].is_same(s)) out[i] = p.sizes();
  }
  return out;
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Copies elements [b, e) of `name` into `dst`, a contiguous tensor of e - b
// elements (raw: no autograd, no version bump).
void read_into(const CheckpointSource& src, const std::string& name, int64_t b, int64_t e,
               const Tensor& dst) {
  COHORT_ASSERT(dst.is_contiguous() && dst.numel() == e - b, "read_into: bad destination");
  if (e <= b) return;
  if (dst.is_cpu()) {
    src.read(name, b, e, dst.raw_data());
    return;
  }
  // A shard on a device: read on the host, then one copy across.
  Tensor host = Tensor::empty(dst.sizes(), dst.dtype());
  src.read(name, b, e, host.raw_data());
  copy_between_devices(dst, host);
}

// Where a tensor's elements start, on whichever device they live.
const void* address_of(const Tensor& t) { return t.is_cpu() ? t.raw_data() : t.device_data(); }

const TensorEntry& entry_for(const CheckpointSource& src, const std::string& name,
                             const Shape& shape, DType dtype) {
  const TensorEntry* e = src.find(name);
  if (e == nullptr)
    throw InvalidArgument(
        fmt::format("load_zero_checkpoint: checkpoint '{}' has no tensor '{}' ({} {} expected)",
                    src.path(), name, dtype_name(dtype), shape_str(shape)));
  if (e->shape != shape || e->dtype != dtype)
    throw InvalidArgument(fmt::format(
        "load_zero_checkpoint: checkpoint '{}': tensor '{}' is {} {} there, {} {} here", src.path(),
        name, dtype_name(e->dtype), shape_str(e->shape), dtype_name(dtype), shape_str(shape)));
  return *e;
}

// The parameter a state_dict entry that is not itself in named_parameters()
// aliases (a tied weight, e.g. a GPT's lm_head.weight = transformer.wte.weight),
// or nullptr for a buffer.
const Tensor* aliased_param(const nn::NamedTensors& params, const Tensor& t) {
  for (const auto& [name, p] : params)
    if (address_of(p) == address_of(t) && p.sizes() == t.sizes() && p.dtype() == t.dtype())
      return &p;
  return nullptr;
}

// The pieces are the world's chunks; under HSDP a rank owns a chunk of its
// shard group's layout instead, which this format does not describe.
void check_not_hybrid(const ShardedDataParallel& zero, const char* op) {
  if (zero.replicate_group() != nullptr)
    throw NotSupported(fmt::format(
        "{}: sharded checkpoints of HSDP (hybrid_shard_size {} of {} ranks) are not supported; "
        "write a whole checkpoint (--checkpoint-format whole)",
        op, zero.shard_group().size(), zero.process_group().size()));
}

}  // namespace

std::vector<ShardPiece> zero_checkpoint_pieces(ShardedOptimizer& opt) {
  ShardedDataParallel& zero = opt.model();
  check_not_hybrid(zero, "zero_checkpoint_pieces");
  const int rank = zero.process_group().rank(), world = zero.process_group().size();
  std::vector<ShardPiece> pieces;
  const nn::NamedTensors params = zero.module().named_parameters();
  auto chunk_piece = [&](const std::string& name, const Tensor& p) {
    Tensor chunk = zero.local_chunk(p);
    auto [b, e] = shard_range(p.numel(), rank, world);
    COHORT_ASSERT(chunk.numel() == e - b,
                  "zero_checkpoint_pieces: chunk of '{}' has {} elements, expected {}", name,
                  chunk.numel(), e - b);
    return ShardPiece{kModelPrefix + name, p.sizes(), b, chunk.detach()};
  };
  // state_dict order and names (tied weights under each of their names).
  for (const auto& [name, t] : zero.module().state_dict()) {
    if (const Tensor* p = aliased_param(params, t)) {
      pieces.push_back(chunk_piece(name, *p));
    } else {
      pieces.push_back(replicated_piece(kModelPrefix + name, t, rank, world));
    }
  }

  const std::vector<Tensor> shards = numbered_params(opt.optimizer());
  const std::vector<Shape> shapes = full_shapes(opt);
  for (const auto& [key, t] : opt.optimizer().state_dict()) {
    const int64_t i = optim::state_key_param_index(key);
    const bool chunked = i >= 0 && t.dim() == 1 && t.sizes() == shards[i].sizes();
    if (!chunked) {
      pieces.push_back(replicated_piece(kOptimizerPrefix + key, t, rank, world));
      continue;
    }
    const Shape& shape = shapes[static_cast<size_t>(i)];
    auto [b, e] = shard_range(numel_of(shape), rank, world);
    COHORT_ASSERT(t.numel() == e - b, "zero_checkpoint_pieces: '{}' has {} elements, expected {}",
                  key, t.numel(), e - b);
    pieces.push_back({kOptimizerPrefix + key, shape, b, t});
  }
  return pieces;
}

std::string save_zero_checkpoint(ShardedOptimizer& opt, const std::string& root,
                                 const TrainingState& state, const Metadata& info,
                                 const SaveOptions& options) {
  Metadata meta = info;
  meta["cohort.sharded.zero_stage"] = std::to_string(opt.model().stage());
  return save_sharded_checkpoint(opt.model().process_group(), root, zero_checkpoint_pieces(opt),
                                 state, meta, options);
}

void load_zero_checkpoint(const CheckpointSource& src, ShardedOptimizer& opt) {
  ShardedDataParallel& zero = opt.model();
  check_not_hybrid(zero, "load_zero_checkpoint");
  const int rank = zero.process_group().rank(), world = zero.process_group().size();
  const bool sharded_params = zero.stage() == 3;

  // Check every model tensor first, so a checkpoint of another model changes nothing.
  const TensorDict sd = zero.module().state_dict();
  for (const auto& [name, t] : sd) entry_for(src, kModelPrefix + name, t.sizes(), t.dtype());
  for (const TensorEntry& e : src.tensors())
    if (e.name.starts_with(kModelPrefix) &&
        !sd.contains(e.name.substr(std::string(kModelPrefix).size())))
      throw InvalidArgument(
          fmt::format("load_zero_checkpoint: checkpoint '{}' has tensor '{}' {} that the model "
                      "({}) does not have",
                      src.path(), e.name, shape_str(e.shape), zero.module().type_name()));

  // The optimizer: this rank's chunk of each per-parameter state, the rest whole.
  const std::vector<Tensor> shards = numbered_params(opt.optimizer());
  const std::vector<Shape> shapes = full_shapes(opt);
  TensorDict mine;
  for (const TensorEntry& e : src.tensors()) {
    if (!e.name.starts_with(kOptimizerPrefix)) continue;
    const std::string key = e.name.substr(std::string(kOptimizerPrefix).size());
    const int64_t i = optim::state_key_param_index(key);
    const bool chunked = i >= 0 && i < static_cast<int64_t>(shards.size()) && !e.shape.empty() &&
                         e.shape == shapes[static_cast<size_t>(i)];
    if (!chunked) {
      mine.insert(key, src.read_tensor(e.name));
      continue;
    }
    auto [b, en] = shard_range(e.numel(), rank, world);
    COHORT_ASSERT(shards[static_cast<size_t>(i)].numel() == en - b,
                  "load_zero_checkpoint: shard of parameter {} has {} elements, expected {}", i,
                  shards[static_cast<size_t>(i)].numel(), en - b);
    mine.insert(key, src.read_range(e.name, b, en));
  }
  try {
    opt.optimizer().load_state_dict(mine);  // checks everything before changing anything
  } catch (const InvalidArgument& ex) {
    throw InvalidArgument(
        fmt::format("load_zero_checkpoint: checkpoint '{}' does not fit the optimizer: {}",
                    src.path(), ex.what()));
  }

  // The model: stage 3 its chunks, stages 1 and 2 the whole parameters
  // (a tied weight once, under its named_parameters() name).
  const nn::NamedTensors params = zero.module().named_parameters();
  for (const auto& [name, p] : params) {
    if (sharded_params) {
      auto [b, e] = shard_range(p.numel(), rank, world);
      read_into(src, kModelPrefix + name, b, e, zero.local_chunk(p));
    } else {
      read_into(src, kModelPrefix + name, 0, p.numel(), p.detach());
    }
  }
  for (const auto& [name, t] : sd)
    if (aliased_param(params, t) == nullptr) read_into(src, kModelPrefix + name, 0, t.numel(), t);
  // Stage 3: nothing stays gathered from before (the next forward gathers
  // the loaded segments).
  if (sharded_params) zero.after_step();
}

}  // namespace cohort::checkpoint
