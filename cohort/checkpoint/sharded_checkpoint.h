// Sharded checkpoints: every rank writes only the pieces of the model and
// optimizer state it holds, each with its place in the whole tensor, so a
// ZeRO job saves without gathering anything; any world size reads back the
// ranges it needs; `cohort reshard` converts offline between world sizes and
// to and from the whole checkpoints of checkpoint.h, one tensor at a time.
//
// Layout of a sharded checkpoint (a step-NNNNNNNN directory, as whole ones):
//   rank-00000-of-00004.safetensors ... rank-00003-of-00004.safetensors
//       one per writing rank. Each tensor of the state is flattened (row
//       major) and its elements split over the files: the file of rank r holds
//       elements [begin, end) of tensor `name` as a 1-d safetensors entry of
//       end - begin elements named `name`; the metadata key "shard.<name>"
//       holds "<begin>|<d0>,<d1>,..." (the whole tensor's shape; "0|" for a
//       0-d tensor). Names: "model/<state_dict name>" and
//       "optimizer/<optimizer state_dict key>". Writers split every tensor of
//       n elements as FlatLayout does: c = ceil(n / N), rank r holds
//       [r c, min(n, (r + 1) c)) (shard_range), so scalars and small tensors
//       sit in the first files; readers only need the ranges to cover each
//       tensor exactly once.
//   sharded.safetensors
//       no tensors (kShardedMetaFile); metadata: the training state
//       (encode_training_state, training_state.h) plus "cohort.sharded.version"
//       (kShardedFormatVersion), "cohort.sharded.world_size" (number of rank files) and whatever
//       the writer adds (strategy, stage). Written last.
// Crash safety (checkpoint_dir.h): the files are written into a temporary
// directory in the root (rank 0 creates it, every rank writes its file, rank 0
// writes sharded.safetensors after every rank reported success) which is then
// renamed to step-N, so a partial checkpoint is never taken for a whole one.
// This file knows nothing of checkpoint.h's whole-checkpoint functions (which
// read sharded checkpoints through it), only their file names.
//
// Reading: open_checkpoint() gives a CheckpointSource over a sharded
// checkpoint or a whole one (model.safetensors [+ optimizer.safetensors],
// names prefixed the same way); read() copies any element range of a tensor
// with pread from the files that overlap it (headers only are read up front).
//
// Errors: IoError naming the file and the tensor for missing, corrupt or
// inconsistent files (a tensor whose pieces overlap or leave a gap, shapes or
// dtypes that disagree between files, a missing rank file);
// InvalidArgument for a range outside a tensor or an unknown name.
// Thread safety: a CheckpointSource may be read from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/checkpoint/checkpoint_dir.h"
#include "cohort/distributed/process_group.h"

namespace cohort::checkpoint {

inline constexpr int kShardedFormatVersion = 1;
inline constexpr const char* kModelPrefix = "model/";
inline constexpr const char* kOptimizerPrefix = "optimizer/";

// Elements [begin, end) of a tensor of `numel` elements that rank `rank` of
// `world` holds: c = ceil(numel / world), [rank c, min(numel, (rank + 1) c)),
// empty (begin == end) past the end.
std::pair<int64_t, int64_t> shard_range(int64_t numel, int rank, int world);

// "rank-00002-of-00004.safetensors".
std::string rank_file_name(int rank, int world);

// One piece of one tensor: elements [begin, begin + data.numel()) of the
// flattened tensor `name` whose whole shape is `shape`.
struct ShardPiece {
  std::string name;  // "model/..." or "optimizer/..."
  Shape shape;
  int64_t begin = 0;
  Tensor data;  // any layout (written contiguous), numel() elements
};

// This rank's piece of a tensor every rank holds whole (a buffer, a
// replicated optimizer value): shard_range of it.
ShardPiece replicated_piece(const std::string& name, const Tensor& whole, int rank, int world);

// Writes one rank's file (atomically). InvalidArgument for a piece outside
// its tensor.
void write_rank_file(const std::string& path, const std::vector<ShardPiece>& pieces, int rank,
                     int world);

// Collective over `group`: writes <root>/step-<state.step>/ with one file per
// rank (this rank's `pieces`) and returns its path on every rank. `info` is
// added to sharded.safetensors' metadata (e.g. "cohort.sharded.strategy").
// A failure on any rank fails every rank (IoError naming the rank and its
// message) and leaves no step directory.
std::string save_sharded_checkpoint(distributed::ProcessGroup& group, const std::string& root,
                                    const std::vector<ShardPiece>& pieces,
                                    const TrainingState& state, const Metadata& info = {},
                                    const SaveOptions& options = {});

// Whether `dir` is a sharded checkpoint directory (has sharded.safetensors).
bool is_sharded_checkpoint(const std::string& dir);

struct TensorEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t numel() const;
};

// Any checkpoint as tensors whose element ranges can be read.
class CheckpointSource {
 public:
  virtual ~CheckpointSource() = default;
  // In file order (model tensors first).
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // nullptr when there is no such tensor.
  const TensorEntry* find(const std::string& name) const;
  // Copies elements [begin, end) of `name` into dst (end - begin elements of
  // its dtype). Only the overlapping parts of the files are read.
  virtual void read(const std::string& name, int64_t begin, int64_t end, void* dst) const = 0;
  Tensor read_range(const std::string& name, int64_t begin, int64_t end) const;  // 1-d
  Tensor read_tensor(const std::string& name) const;  // whole, in its shape

  // The checkpoint's metadata (training state keys as encode_training_state).
  const Metadata& metadata() const { return metadata_; }
  TrainingState state() const { return decode_training_state(metadata_, path_); }
  // Number of rank files (1 for a whole checkpoint) and whether sharded.
  int world_size() const { return world_size_; }
  bool sharded() const { return sharded_; }
  const std::string& path() const { return path_; }
  // Bytes read by read() so far (for tests of what a rank reads).
  uint64_t bytes_read() const { return bytes_read_; }

 protected:
  std::vector<TensorEntry> tensors_;
  std::map<std::string, size_t> index_;
  Metadata metadata_;
  std::string path_;
  int world_size_ = 1;
  bool sharded_ = false;
  mutable uint64_t bytes_read_ = 0;
};

// A sharded checkpoint directory, a whole one (model.safetensors and, when
// present, optimizer.safetensors), a model.safetensors file, or a root (its
// latest complete checkpoint). IoError when it is none of these.
std::unique_ptr<CheckpointSource> open_checkpoint(const std::string& path);

// The whole model and optimizer state dicts of a source (for strategies that
// load whole tensors): names without their prefix.
TensorDict read_state_dict(const CheckpointSource& source, const std::string& prefix);

struct ReshardStats {
  int64_t tensors = 0;
  uint64_t bytes = 0;                 // tensor bytes written
  uint64_t largest_buffer_bytes = 0;  // the largest buffer held at once
};

// Converts the checkpoint at `src` (anything open_checkpoint takes) into a new
// checkpoint directory `dst` (which must not exist): sharded over `world`
// files, or whole (model.safetensors + optimizer.safetensors) when world is 0.
// Streams one tensor piece at a time: memory is bounded by the largest tensor
// (whole output) or the largest piece (sharded output), not the model.
// Tensor bytes are copied unchanged, so converting back gives the same bytes.
// Written into a temporary sibling and renamed, as checkpoints are.
ReshardStats reshard_checkpoint(const std::string& src, const std::string& dst, int world);

}  // namespace cohort::checkpoint
