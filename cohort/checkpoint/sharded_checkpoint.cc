#include "cohort/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <filesystem>

#include "cohort/base/unique_fd.h"
#include "cohort/checkpoint/atomic_file.h"
#include "cohort/checkpoint/checkpoint_writers_impl.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kShardKey = "shard.";
constexpr const char* kVersionKey = "cohort.sharded.version";
constexpr const char* kWorldKey = "cohort.sharded.world_size";
constexpr const char* kRankKey = "cohort.sharded.rank";

std::string encode_place(int64_t begin, const Shape& shape) {
  std::string s = std::to_string(begin) + "|";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s;
}

bool parse_int(std::string_view s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && *v >= 0;
}

bool decode_place(const std::string& s, int64_t* begin, Shape* shape) {
  const size_t bar = s.find('|');
  if (bar == std::string::npos || !parse_int(std::string_view(s).substr(0, bar), begin))
    return false;
  shape->clear();
  std::string_view rest = std::string_view(s).substr(bar + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    int64_t d = 0;
    if (!parse_int(rest.substr(0, comma), &d)) return false;
    shape->push_back(d);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return true;
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int parse_world(const Metadata& m, const char* key, const std::string& path) {
  auto it = m.find(key);
  int64_t v = 0;
  if (it == m.end() || !parse_int(it->second, &v) || v < 1 || v > (1 << 24))
    throw IoError(
        fmt::format("sharded checkpoint: '{}': metadata '{}' is missing or not a "
                    "positive integer",
                    path, key));
  return static_cast<int>(v);
}

class ShardedSource final : public CheckpointSource {
 public:
  explicit ShardedSource(const std::string& dir) {
    path_ = dir;
    sharded_ = true;
    const std::string meta_path = (fs::path(dir) / kShardedMetaFile).string();
    SafetensorsHeader meta = read_safetensors_header(meta_path);
    metadata_ = meta.metadata;
    auto v = metadata_.find(kVersionKey);
    if (v == metadata_.end() || v->second != std::to_string(kShardedFormatVersion))
      throw IoError(fmt::format(
          "sharded checkpoint: '{}': format version '{}', this cohort reads "
          "version {}",
          meta_path, v == metadata_.end() ? "(none)" : v->second, kShardedFormatVersion));
    world_size_ = parse_world(metadata_, kWorldKey, meta_path);
    // Fails early on a bad training state; plain weights resharded have none.
    if (metadata_.contains("cohort.step")) decode_training_state(metadata_, meta_path);
    for (int r = 0; r < world_size_; ++r) add_file(dir, r);
    check_coverage();
  }

  void read(const std::string& name, int64_t begin, int64_t end, void* dst) const override {
    const TensorEntry& e = entry(name, begin, end);
    const size_t es = dtype_size(e.dtype);
    char* out = static_cast<char*>(dst);
    for (const Piece& p : pieces_[index_.at(name)]) {
      const int64_t b = std::max(begin, p.begin), en = std::min(end, p.end);
      if (b >= en) continue;
      const uint64_t bytes = static_cast<uint64_t>(en - b) * es;
      pread_all(fds_[p.file].get(), out + (b - begin) * es, bytes,
                p.offset + static_cast<uint64_t>(b - p.begin) * es,
                fmt::format("sharded checkpoint: '{}': tensor '{}'", files_[p.file], name));
      bytes_read_ += bytes;
    }
  }

 private:
  struct Piece {
    size_t file;
    int64_t begin, end;
    uint64_t offset;  // file offset of element `begin`
  };

  const TensorEntry& entry(const std::string& name, int64_t begin, int64_t end) const {
    auto it = index_.find(name);
    if (it == index_.end())
      throw InvalidArgument(
          fmt::format("sharded checkpoint '{}': no tensor '{}' in it", path_, name));
    const TensorEntry& e = tensors_[it->second];
    COHORT_CHECK(0 <= begin && begin <= end && end <= e.numel(),
                 "sharded checkpoint '{}': range [{}, {}) is outside tensor '{}' of {} elements",
                 path_, begin, end, name, e.numel());
    return e;
  }

  void add_file(const std::string& dir, int r) {
    const std::string path = (fs::path(dir) / rank_file_name(r, world_size_)).string();
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw IoError(
          fmt::format("sharded checkpoint '{}': rank file '{}' is missing (the "
                      "checkpoint was written by {} ranks)",
                      dir, path, world_size_));
    SafetensorsHeader h = read_safetensors_header(path);
    const size_t f = files_.size();
    files_.push_back(path);
    fds_.emplace_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fds_.back().valid())
      throw_errno(fmt::format("sharded checkpoint: cannot open '{}'", path), errno);
    for (const TensorInfo& t : h.tensors) {
      auto m = h.metadata.find(kShardKey + t.name);
      int64_t begin = 0;
      Shape shape;
      if (m == h.metadata.end() || !decode_place(m->second, &begin, &shape))
        throw IoError(
            fmt::format("sharded checkpoint: '{}': tensor '{}' has no valid '{}{}' "
                        "metadata (\"<begin>|<shape>\")",
                        path, t.name, kShardKey, t.name));
      if (t.shape.size() != 1)
        throw IoError(fmt::format("sharded checkpoint: '{}': piece of '{}' is {}, expected 1-d",
                                  path, t.name, shape_str(t.shape)));
      const int64_t end = begin + t.shape[0];
      auto [it, fresh] = index_.emplace(t.name, tensors_.size());
      if (fresh) {
        tensors_.push_back({t.name, t.dtype, shape});
        pieces_.emplace_back();
      } else {
        const TensorEntry& e = tensors_[it->second];
        if (e.shape != shape || e.dtype != t.dtype)
          throw IoError(fmt::format(
              "sharded checkpoint: '{}': tensor '{}' is {} {} here but {} {} in an earlier file",
              path, t.name, dtype_name(t.dtype), shape_str(shape), dtype_name(e.dtype),
              shape_str(e.shape)));
      }
      if (end > numel_of(shape))
        throw IoError(
            fmt::format("sharded checkpoint: '{}': piece [{}, {}) of '{}' runs past its "
                        "{} elements (shape {})",
                        path, begin, end, t.name, numel_of(shape), shape_str(shape)));
      pieces_[it->second].push_back({f, begin, end, h.data_start + t.begin});
    }
  }

  // Every tensor's pieces cover [0, numel) exactly once.
  void check_coverage() {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      auto& ps = pieces_[i];
      std::sort(ps.begin(), ps.end(),
                [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
      int64_t covered = 0;
      for (const Piece& p : ps) {
        if (p.begin == p.end) continue;
        if (p.begin != covered)
          throw IoError(fmt::format(
              "sharded checkpoint '{}': tensor '{}': elements [{}, {}) are {} (at '{}')", path_,
              tensors_[i].name, std::min(covered, p.begin), std::max(covered, p.begin),
              p.begin < covered ? "in two files" : "in no file", files_[p.file]));
        covered = p.end;
      }
      if (covered != tensors_[i].numel())
        throw IoError(
            fmt::format("sharded checkpoint '{}': tensor '{}': elements [{}, {}) are in "
                        "no file",
                        path_, tensors_[i].name, covered, tensors_[i].numel()));
    }
  }

  std::vector<std::string> files_;
  std::vector<UniqueFd> fds_;
  std::vector<std::vector<Piece>> pieces_;
};

class WholeSource final : public CheckpointSource {
 public:
  // dir: a checkpoint directory, or a model.safetensors file (model only).
  explicit WholeSource(const std::string& path) {
    std::error_code ec;
    fs::path model = fs::is_regular_file(path, ec) ? fs::path(path) : fs::path(path) / kModelFile;
    path_ = path;
    add_file(model.string(), kModelPrefix, /*metadata=*/true);
    const fs::path opt = model.parent_path() / kOptimizerFile;
    if (!fs::is_regular_file(path, ec) && fs::exists(opt, ec))
      add_file(opt.string(), kOptimizerPrefix, false);
  }

  void read(const std::string& name, int64_t begin, int64_t end, void* dst) const override {
    auto it = index_.find(name);
    if (it == index_.end())
      throw InvalidArgument(fmt::format("checkpoint '{}': no tensor '{}' in it", path_, name));
    const TensorEntry& e = tensors_[it->second];
    COHORT_CHECK(0 <= begin && begin <= end && end <= e.numel(),
                 "checkpoint '{}': range [{}, {}) is outside tensor '{}' of {} elements", path_,
                 begin, end, name, e.numel());
    const size_t es = dtype_size(e.dtype);
    const Place& p = places_[it->second];
    const uint64_t bytes = static_cast<uint64_t>(end - begin) * es;
    if (bytes > 0)
      pread_all(fds_[p.file].get(), dst, bytes, p.offset + static_cast<uint64_t>(begin) * es,
                fmt::format("checkpoint: '{}': tensor '{}'", files_[p.file], name));
    bytes_read_ += bytes;
  }

 private:
  struct Place {
    size_t file;
    uint64_t offset;
  };

  void add_file(const std::string& path, const std::string& prefix, bool metadata) {
    SafetensorsHeader h = read_safetensors_header(path);
    // A plain weights file (save_model) has no training state; state()
    // fails on it, resharding does not need one.
    if (metadata) {
      metadata_ = h.metadata;
      if (metadata_.contains("cohort.step")) decode_training_state(metadata_, path);
    }
    const size_t f = files_.size();
    files_.push_back(path);
    fds_.emplace_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fds_.back().valid()) throw_errno(fmt::format("checkpoint: cannot open '{}'", path), errno);
    for (const TensorInfo& t : h.tensors) {
      const std::string name = prefix + t.name;
      if (!index_.emplace(name, tensors_.size()).second)
        throw IoError(fmt::format("checkpoint: '{}': tensor '{}' appears twice", path, t.name));
      tensors_.push_back({name, t.dtype, t.shape});
      places_.push_back({f, h.data_start + t.begin});
    }
  }

  std::vector<std::string> files_;
  std::vector<UniqueFd> fds_;
  std::vector<Place> places_;
};

}  // namespace

namespace detail {

std::string begin_sharded_dir(distributed::ProcessGroup& group, const std::string& root,
                              const std::string& name, int64_t step, const char* op) {
  std::string tmp;
  std::exception_ptr error;
  if (group.rank() == 0) {
    try {
      COHORT_CHECK(step >= 0, "save_sharded_checkpoint: step must be >= 0, got {}", step);
      tmp = begin_checkpoint_dir(root, name, op);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree(group, op, error);
  return broadcast_string(group, tmp, 0);
}

std::string broadcast_string(distributed::ProcessGroup& group, std::string s, int root) {
  int64_t n = group.rank() == root ? static_cast<int64_t>(s.size()) : 0;
  group.broadcast(&n, 1, distributed::DataType::kInt64, {.root = root});
  s.resize(static_cast<size_t>(n));
  if (n > 0)
    group.broadcast(s.data(), static_cast<size_t>(n), distributed::DataType::kUInt8,
                    {.root = root});
  return s;
}

void agree(distributed::ProcessGroup& group, const char* op, std::exception_ptr error) {
  std::string message;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  // The lowest failing rank (size() when none).
  int64_t first = error ? group.rank() : group.size();
  int64_t neg = -first;
  group.all_reduce(&neg, 1, distributed::DataType::kInt64, {.op = distributed::ReduceOp::kMax});
  first = -neg;
  if (first == group.size()) return;
  message = broadcast_string(group, message, static_cast<int>(first));
  if (error) std::rethrow_exception(error);
  throw IoError(fmt::format("{}: rank {} of {}: rank {} failed: {}", op, group.rank(), group.size(),
                            first, message));
}

void write_sharded_meta(const std::string& dir, const TrainingState& state, const Metadata& info,
                        int world) {
  Metadata meta = encode_training_state(state);
  for (const auto& [k, v] : info) meta[k] = v;
  meta[kVersionKey] = std::to_string(kShardedFormatVersion);
  meta[kWorldKey] = std::to_string(world);
  save_safetensors((fs::path(dir) / kShardedMetaFile).string(), TensorDict(), meta);
}

}  // namespace detail

using detail::agree;
using detail::broadcast_string;

std::pair<int64_t, int64_t> shard_range(int64_t numel, int rank, int world) {
  COHORT_CHECK(world >= 1 && rank >= 0 && rank < world && numel >= 0,
               "shard_range: need 0 <= rank < world and numel >= 0, got rank {} of {}, numel {}",
               rank, world, numel);
  const int64_t c = (numel + world - 1) / world;
  const int64_t b = std::min(numel, rank * c);
  return {b, std::min(numel, b + c)};
}

std::string rank_file_name(int rank, int world) {
  return fmt::format("rank-{:05d}-of-{:05d}.safetensors", rank, world);
}

int64_t TensorEntry::numel() const { return numel_of(shape); }

ShardPiece replicated_piece(const std::string& name, const Tensor& whole, int rank, int world) {
  auto [b, e] = shard_range(whole.numel(), rank, world);
  return {name, whole.sizes(), b, whole.contiguous().reshape({-1}).narrow(0, b, e - b)};
}

void write_rank_file(const std::string& path, const std::vector<ShardPiece>& pieces, int rank,
                     int world) {
  Metadata meta;
  meta[kRankKey] = std::to_string(rank);
  meta[kWorldKey] = std::to_string(world);
  TensorDict data;
  for (const ShardPiece& p : pieces) {
    COHORT_CHECK(p.data.defined(), "write_rank_file: piece of '{}' is undefined", p.name);
    const int64_t n = numel_of(p.shape);
    COHORT_CHECK(p.begin >= 0 && p.begin + p.data.numel() <= n,
                 "write_rank_file: piece [{}, {}) of '{}' is outside its {} elements (shape {})",
                 p.begin, p.begin + p.data.numel(), p.name, n, shape_str(p.shape));
    meta[kShardKey + p.name] = encode_place(p.begin, p.shape);
    data.insert(p.name, p.data.contiguous().reshape({p.data.numel()}));
  }
  save_safetensors(path, data, meta);
}

std::string save_sharded_checkpoint(distributed::ProcessGroup& group, const std::string& root,
                                    const std::vector<ShardPiece>& pieces,
                                    const TrainingState& state, const Metadata& info,
                                    const SaveOptions& options) {
  const int rank = group.rank(), world = group.size();
  const std::string name = step_dir_name(state.step);
  // 1. Rank 0 makes the temporary directory and tells the others.
  const std::string tmp =
      detail::begin_sharded_dir(group, root, name, state.step, "save_sharded_checkpoint");
  std::exception_ptr error;
  // 2. Every rank writes its file.
  try {
    write_rank_file((fs::path(tmp) / rank_file_name(rank, world)).string(), pieces, rank, world);
  } catch (...) {
    error = std::current_exception();
  }
  try {
    agree(group, "save_sharded_checkpoint", error);
  } catch (...) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    throw;
  }
  // 3. Rank 0 writes the metadata last and moves the directory in place.
  std::string final_path;
  if (rank == 0) {
    try {
      detail::write_sharded_meta(tmp, state, info, world);
      final_path = commit_checkpoint_dir(tmp, root, name, options);
    } catch (...) {
      error = std::current_exception();
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  agree(group, "save_sharded_checkpoint", error);
  return broadcast_string(group, final_path, 0);
}

bool is_sharded_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(fs::path(dir) / kShardedMetaFile, ec);
}

const TensorEntry* CheckpointSource::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor CheckpointSource::read_range(const std::string& name, int64_t begin, int64_t end) const {
  const TensorEntry* e = find(name);
  if (e == nullptr)
    throw InvalidArgument(fmt::format("checkpoint '{}': no tensor '{}' in it", path_, name));
  Tensor t = Tensor::empty({std::max<int64_t>(0, end - begin)}, e->dtype);
  read(name, begin, end, t.raw_data());
  return t;
}

Tensor CheckpointSource::read_tensor(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (e == nullptr)
    throw InvalidArgument(fmt::format("checkpoint '{}': no tensor '{}' in it", path_, name));
  Tensor t = Tensor::empty(e->shape, e->dtype);
  read(name, 0, e->numel(), t.raw_data());
  return t;
}

std::unique_ptr<CheckpointSource> open_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IoError(fmt::format("checkpoint '{}' does not exist", path));
  if (is_sharded_checkpoint(path)) return std::make_unique<ShardedSource>(path);
  if (fs::is_regular_file(path, ec) || fs::exists(fs::path(path) / kModelFile, ec))
    return std::make_unique<WholeSource>(path);
  std::optional<std::string> latest = latest_checkpoint(path);
  if (!latest)
    throw IoError(fmt::format("'{}' is not a checkpoint (no {} or {}) and holds no complete one",
                              path, kShardedMetaFile, kModelFile));
  return open_checkpoint(*latest);
}

TensorDict read_state_dict(const CheckpointSource& source, const std::string& prefix) {
  TensorDict out;
  for (const TensorEntry& e : source.tensors())
    if (e.name.starts_with(prefix))
      out.insert(e.name.substr(prefix.size()), source.read_tensor(e.name));
  return out;
}

}  // namespace cohort::checkpoint
