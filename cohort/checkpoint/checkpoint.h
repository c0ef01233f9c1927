// Training checkpoints: model, optimizer and the position of a run (epoch,
// step, RNG state, sampler state), saved so that a resumed run continues
// exactly where the saved one was, and so that PyTorch users can read the
// model with ordinary safetensors tooling.
//
// Layout: one directory per checkpoint inside a checkpoint root,
//   <root>/step-00000120/model.safetensors      model.state_dict(), names as
//                                               in PyTorch ("conv1.weight"),
//                                               no prefix; the training state
//                                               in its __metadata__
//   <root>/step-00000120/optimizer.safetensors  optimizer.state_dict() (when
//                                               an optimizer is saved)
// so in PyTorch:  model.load_state_dict(safetensors.torch.load_file(
//                     "<root>/step-00000120/model.safetensors"))
// Metadata keys of model.safetensors: "format" = "pt", "cohort.version",
// "cohort.epoch", "cohort.step", "cohort.rng_state" (hex of
// Generator::get_state()), "cohort.sampler.epoch", "cohort.sampler.position",
// and "extra.<key>" for TrainingState::extra.
//
// Atomicity: a checkpoint is written into a temporary directory in the root
// (".tmp.step-..."), every file fsynced, then renamed to its final name and
// the root fsynced. A crash at any point leaves every earlier checkpoint
// intact and never a partial "step-*" directory, so latest_checkpoint() only
// sees complete ones.
//
// Distributed jobs: the functions here are local; the distributed layer calls
// save_checkpoint on rank 0 and then a barrier, and load_checkpoint on every
// rank.
//
// Errors: IoError naming the path for unreadable, corrupt or truncated files;
// InvalidArgument when the checkpoint does not fit the model (naming the first
// mismatching tensor and both shapes) or optimizer. A failed load leaves the
// model and optimizer unchanged. Thread safety: none beyond that of the model
// and optimizer (do not train while saving).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/checkpoint/safetensors.h"
#include "cohort/data/sampler.h"
#include "cohort/nn/module.h"
#include "cohort/optim/optimizer.h"

namespace cohort::checkpoint {

// Where a run is.
struct TrainingState {
  int64_t epoch = 0;
  int64_t step = 0;                     // optimizer steps taken
  std::vector<uint8_t> rng_state = {};  // Generator::get_state() (may be empty)
  data::SamplerState sampler = {};      // DataLoader::state()
  Metadata extra = {};                  // anything else (scheduler state, ...)
  bool operator==(const TrainingState&) const = default;
};

struct SaveOptions {
  // Keep only the newest `keep_last` checkpoints in the root (0: keep all).
  int64_t keep_last = 0;
};

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";

// Writes <root>/step-<state.step>/ (creating root when needed) and returns
// its path. An existing checkpoint of the same step is replaced.
std::string save_checkpoint(const std::string& root, const nn::Module& model,
                            const optim::Optimizer* optimizer, const TrainingState& state,
                            const SaveOptions& options = {});

// Loads a checkpoint into model (and optimizer, when given) and returns its
// training state. `path` is a checkpoint directory (whole, or sharded at any
// world size: sharded_checkpoint.h), a root (its latest checkpoint is used;
// IoError when it has none), or a model.safetensors file.
TrainingState load_checkpoint(const std::string& path, nn::Module& model,
                              optim::Optimizer* optimizer = nullptr);

// The newest complete checkpoint directory under root (highest step whose
// model file validates; damaged newer ones are skipped with a warning), or
// nullopt when there is none or root does not exist.
std::optional<std::string> latest_checkpoint(const std::string& root);

// --resume: "" -> nullopt; "auto" -> latest_checkpoint(root); anything else
// is a path that must exist (IoError otherwise).
std::optional<std::string> resolve_resume(const std::string& resume, const std::string& root);

// Creates root when needed and checks that files can be created in it;
// IoError naming the path otherwise. Call before training starts.
void check_writable_dir(const std::string& root);

// Throws InvalidArgument naming the first tensor of `model` whose name,
// shape or dtype differs in `dict` (both shapes), or the first extra tensor.
// `source` names the dict in the message.
void check_state_dict_matches(const nn::Module& model, const TensorDict& dict,
                              const std::string& source);

// Just the weights, one file: model.state_dict() as safetensors (atomic), and
// back. For exchanging weights with PyTorch and for inference.
void save_model(const std::string& path, const nn::Module& model, const Metadata& metadata = {});
void load_model(const std::string& path, nn::Module& model);

// The training state encoded in / decoded from a metadata map (decoding
// throws IoError naming `path` on missing or malformed keys).
Metadata encode_training_state(const TrainingState& state);
TrainingState decode_training_state(const Metadata& metadata, const std::string& path);

namespace detail {
// Shared by the whole and the sharded writers (sharded_checkpoint.h).
std::string step_dir_name(int64_t step);  // "step-00000120"
// A fresh temporary name in root (".tmp.<what>.<pid>.<n>").
std::string temp_sibling(const std::string& root, const std::string& what);
// Removes temporaries left in root by writers that no longer run.
void remove_stale_temporaries(const std::string& root);
// Renames the finished temporary directory tmp to root/name (replacing an
// older one), fsyncs root and prunes to options.keep_last; returns the path.
std::string commit_checkpoint_dir(const std::string& tmp, const std::string& root,
                                  const std::string& name, const SaveOptions& options);
// load_checkpoint for a sharded directory: every tensor read whole.
TrainingState load_sharded_checkpoint_whole(const std::string& dir, nn::Module& model,
                                            optim::Optimizer* optimizer);
}  // namespace detail

}  // namespace cohort::checkpoint
