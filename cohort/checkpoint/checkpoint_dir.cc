#include "cohort/checkpoint/checkpoint_dir.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <utility>
#include <vector>

#include "cohort/base/log.h"
#include "cohort/checkpoint/atomic_file.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStepPrefix = "step-";

// "step-00000120" -> 120; false for anything else.
bool parse_step_dir(const std::string& name, int64_t* step) {
  if (!name.starts_with(kStepPrefix) || name.size() == 5) return false;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, *step);
  return ec == std::errc() && p == e && *step >= 0;
}

// Complete checkpoints under root, newest (highest step) first.
std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    int64_t step = 0;
    if (e.is_directory(ec) && parse_step_dir(e.path().filename().string(), &step))
      out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// Removes a directory tree on scope exit unless released.
class TreeGuard {
 public:
  explicit TreeGuard(fs::path p) : path_(std::move(p)) {}
  ~TreeGuard() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

void rename_or_throw(const fs::path& from, const fs::path& to, const char* op) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw_errno(fmt::format("{}: rename '{}' -> '{}'", op, from.string(), to.string()), errno);
}

}  // namespace

std::string step_dir_name(int64_t step) { return fmt::format("{}{:08d}", kStepPrefix, step); }

void remove_stale_temporaries(const std::string& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(kTempPrefix)) continue;
    // .tmp.<what>.<pid>.<counter>
    size_t last = name.rfind('.');
    size_t prev =
        last == std::string::npos || last == 0 ? std::string::npos : name.rfind('.', last - 1);
    if (prev == std::string::npos) continue;
    int pid = 0;
    auto [p, err] = std::from_chars(name.data() + prev + 1, name.data() + last, pid);
    if (err != std::errc() || p != name.data() + last || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

std::string temp_sibling(const std::string& root, const std::string& what) {
  static std::atomic<uint64_t> counter{0};
  return (fs::path(root) /
          fmt::format("{}{}.{}.{}", kTempPrefix, what, ::getpid(), counter.fetch_add(1)))
      .string();
}

std::string begin_checkpoint_dir(const std::string& root, const std::string& name, const char* op) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create '{}': {}", op, root, ec.message()));
  remove_stale_temporaries(root);
  const std::string tmp = temp_sibling(root, name);
  if (!fs::create_directory(tmp, ec) || ec)
    throw IoError(fmt::format("{}: cannot create '{}': {}", op, tmp, ec ? ec.message() : "exists"));
  return tmp;
}

std::string commit_checkpoint_dir(const std::string& tmp_str, const std::string& root_str,
                                  const std::string& name, const SaveOptions& options) {
  const fs::path root(root_str), tmp(tmp_str);
  TreeGuard tmp_guard(tmp);
  std::error_code ec;
  const fs::path final_path = root / name;
  if (fs::exists(final_path, ec)) {
    // rename() cannot replace a non-empty directory: move the old one aside
    // first. A crash in between loses only this step's old copy.
    const fs::path old = temp_sibling(root_str, "old-" + name);
    rename_or_throw(final_path, old, "save_checkpoint");
    TreeGuard old_guard(old);
    rename_or_throw(tmp, final_path, "save_checkpoint");
  } else {
    rename_or_throw(tmp, final_path, "save_checkpoint");
  }
  tmp_guard.release();
  fsync_directory(root.string());

  if (options.keep_last > 0) {
    auto all = list_checkpoints(root);
    for (size_t i = static_cast<size_t>(options.keep_last); i < all.size(); ++i) {
      // Renamed first so a half-deleted directory never looks like a checkpoint.
      const fs::path doomed = temp_sibling(root_str, "del");
      if (::rename(all[i].second.c_str(), doomed.c_str()) == 0) fs::remove_all(doomed, ec);
    }
  }
  return final_path.string();
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  for (const auto& [step, dir] : list_checkpoints(fs::path(root))) {
    std::error_code ec;
    const bool sharded = fs::exists(dir / kShardedMetaFile, ec);
    const std::string model_file = (dir / (sharded ? kShardedMetaFile : kModelFile)).string();
    try {
      SafetensorsHeader h = read_safetensors_header(model_file);
      decode_training_state(h.metadata, model_file);
      return dir.string();
    } catch (const IoError& e) {
      COHORT_WARN("latest_checkpoint: skipping damaged checkpoint '{}': {}", dir.string(),
                  e.what());
    }
  }
  return std::nullopt;
}

std::optional<std::string> resolve_resume(const std::string& resume, const std::string& root) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") return latest_checkpoint(root);
  std::error_code ec;
  if (!fs::exists(resume, ec))
    throw IoError(fmt::format("resume: checkpoint '{}' does not exist", resume));
  return resume;
}

void check_writable_dir(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    throw IoError(
        fmt::format("checkpoint directory '{}' cannot be created: {}", root, ec.message()));
  try {
    AtomicFile probe((fs::path(root) / ".write-check").string());
  } catch (const IoError& e) {
    throw IoError(fmt::format("checkpoint directory '{}' is not writable: {}", root, e.what()));
  }
}

}  // namespace cohort::checkpoint
