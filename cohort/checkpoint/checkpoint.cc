#include "cohort/checkpoint/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "cohort/base/log.h"
#include "cohort/checkpoint/atomic_file.h"
#include "cohort/checkpoint/sharded_checkpoint.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStepPrefix = "step-";
constexpr const char* kVersion = "1";

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

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

bool from_hex(const std::string& s, std::vector<uint8_t>* out) {
  if (s.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    uint8_t v = 0;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + i + 2, v, 16);
    if (ec != std::errc() || p != s.data() + i + 2) return false;
    out->push_back(v);
  }
  return true;
}

int64_t metadata_int(const Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  if (it == m.end())
    throw IoError(
        fmt::format("load_checkpoint: '{}' has no '{}' in its metadata (not a cohort "
                    "checkpoint? use load_model for plain weights)",
                    path, key));
  int64_t v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw IoError(
        fmt::format("load_checkpoint: '{}': metadata '{}' = '{}' is not an integer", path, key, s));
  return v;
}

}  // namespace

namespace detail {

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

}  // namespace detail

namespace {

using detail::remove_stale_temporaries;
using detail::step_dir_name;

fs::path temp_sibling(const fs::path& root, const std::string& what) {
  return fs::path(detail::temp_sibling(root.string(), what));
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

Metadata encode_training_state(const TrainingState& state) {
  Metadata m;
  m["format"] = "pt";
  m["cohort.version"] = kVersion;
  m["cohort.epoch"] = std::to_string(state.epoch);
  m["cohort.step"] = std::to_string(state.step);
  m["cohort.rng_state"] = to_hex(state.rng_state);
  m["cohort.sampler.epoch"] = std::to_string(state.sampler.epoch);
  m["cohort.sampler.position"] = std::to_string(state.sampler.position);
  for (const auto& [k, v] : state.extra) m["extra." + k] = v;
  return m;
}

TrainingState decode_training_state(const Metadata& m, const std::string& path) {
  TrainingState s;
  s.epoch = metadata_int(m, "cohort.epoch", path);
  s.step = metadata_int(m, "cohort.step", path);
  s.sampler.epoch = metadata_int(m, "cohort.sampler.epoch", path);
  s.sampler.position = metadata_int(m, "cohort.sampler.position", path);
  auto rng = m.find("cohort.rng_state");
  if (rng != m.end() && !from_hex(rng->second, &s.rng_state))
    throw IoError(
        fmt::format("load_checkpoint: '{}': metadata 'cohort.rng_state' is not hex", path));
  for (const auto& [k, v] : m)
    if (k.starts_with("extra.")) s.extra[k.substr(6)] = v;
  return s;
}

void check_state_dict_matches(const nn::Module& model, const TensorDict& dict,
                              const std::string& source) {
  const TensorDict expected = model.state_dict();
  for (const auto& [name, t] : expected) {
    const Tensor* have = dict.find(name);
    if (have == nullptr)
      throw InvalidArgument(
          fmt::format("{} does not match the model ({}): tensor '{}' {} is missing from it", source,
                      model.type_name(), name, shape_str(t.sizes())));
    if (have->sizes() != t.sizes())
      throw InvalidArgument(fmt::format(
          "{} does not match the model ({}): tensor '{}' has shape {} in the checkpoint, {} in "
          "the model",
          source, model.type_name(), name, shape_str(have->sizes()), shape_str(t.sizes())));
    if (have->dtype() != t.dtype())
      throw InvalidArgument(fmt::format(
          "{} does not match the model ({}): tensor '{}' is {} in the checkpoint, {} in the model",
          source, model.type_name(), name, dtype_name(have->dtype()), dtype_name(t.dtype())));
  }
  for (const auto& [name, t] : dict)
    if (!expected.contains(name))
      throw InvalidArgument(fmt::format(
          "{} does not match the model ({}): the checkpoint has tensor '{}' {} that the model "
          "does not have",
          source, model.type_name(), name, shape_str(t.sizes())));
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

std::string save_checkpoint(const std::string& root_str, const nn::Module& model,
                            const optim::Optimizer* optimizer, const TrainingState& state,
                            const SaveOptions& options) {
  COHORT_CHECK(state.step >= 0, "save_checkpoint: step must be >= 0, got {}", state.step);
  COHORT_CHECK(options.keep_last >= 0, "save_checkpoint: keep_last must be >= 0, got {}",
               options.keep_last);
  const fs::path root(root_str);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    throw IoError(fmt::format("save_checkpoint: cannot create '{}': {}", root_str, ec.message()));
  remove_stale_temporaries(root);

  const std::string name = step_dir_name(state.step);
  const fs::path tmp = temp_sibling(root, name);
  if (!fs::create_directory(tmp, ec) || ec)
    throw IoError(fmt::format("save_checkpoint: cannot create '{}': {}", tmp.string(),
                              ec ? ec.message() : "exists"));
  TreeGuard tmp_guard(tmp);
  save_safetensors((tmp / kModelFile).string(), model.state_dict(), encode_training_state(state));
  if (optimizer != nullptr)
    save_safetensors((tmp / kOptimizerFile).string(), optimizer->state_dict());

  tmp_guard.release();
  return detail::commit_checkpoint_dir(tmp.string(), root_str, name, options);
}

std::string detail::commit_checkpoint_dir(const std::string& tmp_str, const std::string& root_str,
                                          const std::string& name, const SaveOptions& options) {
  const fs::path root(root_str), tmp(tmp_str);
  TreeGuard tmp_guard(tmp);
  std::error_code ec;
  const fs::path final_path = root / name;
  if (fs::exists(final_path, ec)) {
    // rename() cannot replace a non-empty directory: move the old one aside
    // first. A crash in between loses only this step's old copy.
    const fs::path old = temp_sibling(root, "old-" + name);
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
      const fs::path doomed = temp_sibling(root, "del");
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

TrainingState load_checkpoint(const std::string& path, nn::Module& model,
                              optim::Optimizer* optimizer) {
  std::error_code ec;
  fs::path model_file;
  std::string dir = path;
  if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / kModelFile, ec) &&
      !fs::exists(fs::path(path) / kShardedMetaFile, ec)) {
    std::optional<std::string> latest = latest_checkpoint(path);
    if (!latest)
      throw IoError(fmt::format("load_checkpoint: no complete checkpoint in '{}'", path));
    dir = *latest;
  }
  if (fs::is_directory(dir, ec) && fs::exists(fs::path(dir) / kShardedMetaFile, ec))
    return detail::load_sharded_checkpoint_whole(dir, model, optimizer);
  if (fs::is_regular_file(path, ec)) {
    model_file = path;
  } else if (fs::is_directory(dir, ec)) {
    model_file = fs::path(dir) / kModelFile;
  } else {
    throw IoError(fmt::format("load_checkpoint: '{}' does not exist", path));
  }
  const std::string model_path = model_file.string();
  SafetensorsContents contents = load_safetensors(model_path);
  TrainingState state = decode_training_state(contents.metadata, model_path);
  check_state_dict_matches(model, contents.tensors, fmt::format("checkpoint '{}'", model_path));

  if (optimizer != nullptr) {
    const fs::path opt_file = model_file.parent_path() / kOptimizerFile;
    if (!fs::exists(opt_file, ec))
      throw IoError(fmt::format("load_checkpoint: '{}' has no optimizer state ('{}' is missing)",
                                model_file.parent_path().string(), opt_file.string()));
    SafetensorsContents opt = load_safetensors(opt_file.string());
    try {
      optimizer->load_state_dict(opt.tensors);  // checks everything before changing anything
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("load_checkpoint: '{}' does not fit the optimizer: {}",
                                        opt_file.string(), e.what()));
    }
  }
  model.load_state_dict(contents.tensors, /*strict=*/true);
  return state;
}

void save_model(const std::string& path, const nn::Module& model, const Metadata& metadata) {
  Metadata m = metadata;
  m.emplace("format", "pt");
  save_safetensors(path, model.state_dict(), m);
}

void load_model(const std::string& path, nn::Module& model) {
  SafetensorsContents contents = load_safetensors(path);
  check_state_dict_matches(model, contents.tensors, fmt::format("'{}'", path));
  model.load_state_dict(contents.tensors, /*strict=*/true);
}

}  // namespace cohort::checkpoint
