#include "tools/cohort/checkpoint_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "cohort/base/error.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/core/random.h"
#include "cohort/train/workload.h"

namespace cohort::cli {
namespace fs = std::filesystem;

namespace {

// The file whose metadata describes the checkpoint at `path` (model.safetensors,
// or a sharded checkpoint's sharded.safetensors); resolved here first
// because the model's kind (its metadata) must be known before the model can
// be built to load into.
std::string checkpoint_file_in(const fs::path& dir) {
  return (dir / (checkpoint::is_sharded_checkpoint(dir.string()) ? checkpoint::kShardedMetaFile
                                                                 : checkpoint::kModelFile))
      .string();
}

std::string resolve_model_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / checkpoint::kModelFile, ec) ||
        checkpoint::is_sharded_checkpoint(path))
      return checkpoint_file_in(path);
    if (std::optional<std::string> latest = checkpoint::latest_checkpoint(path))
      return checkpoint_file_in(*latest);
    throw IoError(fmt::format(
        "checkpoint '{}' holds no complete checkpoint (expected a step-NNNNNNNN directory in it, "
        "or a {} file)",
        path, checkpoint::kModelFile));
  }
  throw IoError(fmt::format(
      "checkpoint '{}' does not exist (expected a checkpoint directory, a checkpoint root or a "
      "{} file)",
      path, checkpoint::kModelFile));
}

}  // namespace

CheckpointModel load_checkpoint_model(const std::string& path, const std::string& model_flag) {
  CheckpointModel out;
  out.file = resolve_model_file(path);
  const checkpoint::Metadata meta = checkpoint::read_safetensors_header(out.file).metadata;
  auto it = meta.find("extra.model");
  const std::optional<std::string> saved =
      it != meta.end() ? std::optional<std::string>(it->second) : std::nullopt;
  if (!model_flag.empty() && saved && *saved != model_flag)
    throw InvalidArgument(fmt::format(
        "--model {} does not match checkpoint '{}', which holds model {} (pass --model {} or "
        "leave --model out)",
        model_flag, out.file, *saved, *saved));
  out.kind = train::parse_model(!model_flag.empty() ? model_flag : saved.value_or("net"));
  // The initial weights are all overwritten by the load; the seed is moot.
  Generator gen(0);
  if (out.kind == train::ModelKind::kGpt || out.kind == train::ModelKind::kGpt2) {
    // A GPT's shape is in the checkpoint's metadata (the training run's
    // --n-layer ...); plain weights are taken to be the preset's shape.
    checkpoint::Metadata extra;
    for (const auto& [key, value] : meta) {
      if (key.rfind("extra.", 0) == 0) extra[key.substr(6)] = value;
    }
    out.gpt = train::read_gpt_config(extra).value_or(
        out.kind == train::ModelKind::kGpt2 ? nn::GPTConfig::gpt2() : nn::GPTConfig::reference());
    out.model = std::make_shared<nn::GPT>(out.gpt, gen);
  } else {
    out.model = train::make_model(out.kind, gen);
  }
  if (meta.find("cohort.epoch") == meta.end()) {
    // Weights without training state: PyTorch's state_dict, or load_model's.
    checkpoint::load_model(out.file, *out.model);
    out.plain_weights = true;
  } else {
    // A sharded checkpoint loads from its directory (every tensor read whole).
    const fs::path file(out.file);
    checkpoint::TrainingState st = checkpoint::load_checkpoint(
        file.filename() == checkpoint::kShardedMetaFile ? file.parent_path().string() : out.file,
        *out.model);
    out.step = st.step;
    out.extra = std::move(st.extra);
  }
  out.model->eval();
  return out;
}

}  // namespace cohort::cli
