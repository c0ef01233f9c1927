// reshard_checkpoint (sharded_checkpoint.h): streams every tensor of a
// source checkpoint into a new sharded or whole one, one piece at a time.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "cohort/checkpoint/atomic_file.h"
#include "cohort/checkpoint/sharded_checkpoint.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

// A reusable byte buffer that remembers the most it ever held.
class Buffer {
 public:
  explicit Buffer(ReshardStats& stats) : stats_(stats) {}
  char* get(uint64_t bytes) {
    if (bytes > data_.size()) {
      // Give the old one back first: at most one buffer at a time.
      std::vector<char>().swap(data_);
      data_.resize(bytes);
    }
    stats_.largest_buffer_bytes = std::max<uint64_t>(stats_.largest_buffer_bytes, data_.size());
    return data_.data();
  }

 private:
  ReshardStats& stats_;
  std::vector<char> data_;
};

// Copies tensor `e`'s elements [b, e_) from src to file through buf.
void copy_range(const CheckpointSource& src, const TensorEntry& e, int64_t b, int64_t end,
                AtomicFile& file, Buffer& buf, ReshardStats& stats) {
  const uint64_t bytes = static_cast<uint64_t>(end - b) * dtype_size(e.dtype);
  if (bytes == 0) return;
  char* p = buf.get(bytes);
  src.read(e.name, b, end, p);
  file.write(p, bytes);
  stats.bytes += bytes;
}

// model/<name> -> model.safetensors, optimizer/<name> -> optimizer.safetensors.
void write_whole(const CheckpointSource& src, const fs::path& dir, Buffer& buf,
                 ReshardStats& stats) {
  for (const char* prefix : {kModelPrefix, kOptimizerPrefix}) {
    std::vector<TensorInfo> infos;
    std::vector<const TensorEntry*> entries;
    for (const TensorEntry& e : src.tensors()) {
      if (!e.name.starts_with(prefix)) continue;
      infos.push_back({e.name.substr(std::string(prefix).size()), e.dtype, e.shape});
      entries.push_back(&e);
    }
    const bool model = std::string(prefix) == kModelPrefix;
    if (!model && entries.empty()) continue;  // no optimizer state
    Metadata meta;
    if (model) {
      for (const auto& [k, v] : src.metadata())
        if (!k.starts_with("cohort.sharded.")) meta[k] = v;
      meta["format"] = "pt";
    }
    AtomicFile file((dir / (model ? kModelFile : kOptimizerFile)).string());
    const std::string header = safetensors_header_bytes(infos, meta);
    file.write(header.data(), header.size());
    for (const TensorEntry* e : entries) {
      copy_range(src, *e, 0, e->numel(), file, buf, stats);
      ++stats.tensors;
    }
    file.commit();
  }
}

void write_sharded(const CheckpointSource& src, const fs::path& dir, int world, Buffer& buf,
                   ReshardStats& stats) {
  std::vector<std::unique_ptr<AtomicFile>> files;
  for (int r = 0; r < world; ++r) {
    std::vector<TensorInfo> infos;
    Metadata meta;
    meta["cohort.sharded.rank"] = std::to_string(r);
    meta["cohort.sharded.world_size"] = std::to_string(world);
    for (const TensorEntry& e : src.tensors()) {
      auto [b, end] = shard_range(e.numel(), r, world);
      infos.push_back({e.name, e.dtype, {end - b}});
      std::string place = std::to_string(b) + "|";
      for (size_t i = 0; i < e.shape.size(); ++i)
        place += (i > 0 ? "," : "") + std::to_string(e.shape[i]);
      meta["shard." + e.name] = place;
    }
    files.push_back(std::make_unique<AtomicFile>((dir / rank_file_name(r, world)).string()));
    const std::string header = safetensors_header_bytes(infos, meta);
    files.back()->write(header.data(), header.size());
  }
  for (const TensorEntry& e : src.tensors()) {
    for (int r = 0; r < world; ++r) {
      auto [b, end] = shard_range(e.numel(), r, world);
      copy_range(src, e, b, end, *files[static_cast<size_t>(r)], buf, stats);
    }
    ++stats.tensors;
  }
  for (auto& f : files) f->commit();
  Metadata meta;
  for (const auto& [k, v] : src.metadata())
    if (!k.starts_with("cohort.sharded.")) meta[k] = v;
  meta["cohort.sharded.version"] = std::to_string(kShardedFormatVersion);
  meta["cohort.sharded.world_size"] = std::to_string(world);
  save_safetensors((dir / kShardedMetaFile).string(), TensorDict(), meta);
}

}  // namespace

ReshardStats reshard_checkpoint(const std::string& src_path, const std::string& dst, int world) {
  COHORT_CHECK(world >= 0,
               "reshard: the world size must be >= 1 (or 0 for a whole checkpoint), "
               "got {}",
               world);
  std::unique_ptr<CheckpointSource> src = open_checkpoint(src_path);
  std::error_code ec;
  if (fs::exists(dst, ec))
    throw InvalidArgument(
        fmt::format("reshard: destination '{}' exists; give a new directory", dst));
  fs::path target = fs::absolute(dst, ec);
  const fs::path parent = target.parent_path();
  fs::create_directories(parent, ec);
  if (ec)
    throw IoError(fmt::format("reshard: cannot create '{}': {}", parent.string(), ec.message()));
  const fs::path tmp(temp_sibling(parent.string(), target.filename().string()));
  if (!fs::create_directory(tmp, ec) || ec)
    throw IoError(
        fmt::format("reshard: cannot create '{}': {}", tmp.string(), ec ? ec.message() : "exists"));
  ReshardStats stats;
  try {
    Buffer buf(stats);
    if (world == 0) {
      write_whole(*src, tmp, buf, stats);
    } else {
      write_sharded(*src, tmp, world, buf, stats);
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0)
      throw_errno(fmt::format("reshard: rename '{}' -> '{}'", tmp.string(), target.string()),
                  errno);
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return stats;
}

}  // namespace cohort::checkpoint
