#include "cohort/checkpoint/checkpoint.h"

#include <filesystem>

#include "cohort/checkpoint/checkpoint_writers_impl.h"
#include "cohort/checkpoint/sharded_checkpoint.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

// load_checkpoint of a sharded directory: every tensor read whole.
TrainingState load_sharded_whole(const std::string& dir, nn::Module& model,
                                 optim::Optimizer* optimizer) {
  std::unique_ptr<CheckpointSource> src = open_checkpoint(dir);
  TrainingState state = src->state();
  TensorDict m = read_state_dict(*src, kModelPrefix);
  check_state_dict_matches(model, m, fmt::format("sharded checkpoint '{}'", dir));
  if (optimizer != nullptr) {
    TensorDict o = read_state_dict(*src, kOptimizerPrefix);
    try {
      optimizer->load_state_dict(o);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(
          fmt::format("load_checkpoint: sharded checkpoint '{}' does not fit the optimizer: {}",
                      dir, e.what()));
    }
  }
  model.load_state_dict(m, /*strict=*/true);
  return state;
}

}  // namespace

namespace detail {

void write_whole_files(const std::string& dir, const TensorDict& model_state,
                       const TensorDict* optimizer_state, const TrainingState& state) {
  save_safetensors((fs::path(dir) / kModelFile).string(), model_state,
                   encode_training_state(state));
  if (optimizer_state != nullptr)
    save_safetensors((fs::path(dir) / kOptimizerFile).string(), *optimizer_state);
}

}  // namespace detail

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

std::string save_checkpoint(const std::string& root, const nn::Module& model,
                            const optim::Optimizer* optimizer, const TrainingState& state,
                            const SaveOptions& options) {
  COHORT_CHECK(state.step >= 0, "save_checkpoint: step must be >= 0, got {}", state.step);
  COHORT_CHECK(options.keep_last >= 0, "save_checkpoint: keep_last must be >= 0, got {}",
               options.keep_last);
  const std::string name = step_dir_name(state.step);
  const fs::path tmp = begin_checkpoint_dir(root, name, "save_checkpoint");
  try {
    const TensorDict opt_state = optimizer != nullptr ? optimizer->state_dict() : TensorDict();
    detail::write_whole_files(tmp.string(), model.state_dict(),
                              optimizer != nullptr ? &opt_state : nullptr, state);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return commit_checkpoint_dir(tmp.string(), root, name, options);
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
  if (is_sharded_checkpoint(dir)) return load_sharded_whole(dir, model, optimizer);
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
