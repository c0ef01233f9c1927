// TrainingState: where a training run is (epoch, step, RNG state, sampler
// position, anything else the loop keeps), and its encoding as the metadata
// of a checkpoint's first safetensors file, so that a resumed run continues
// exactly where the saved one was. Every checkpoint carries it, whole
// (checkpoint.h) or sharded (sharded_checkpoint.h), and latest_checkpoint
// (checkpoint_dir.h) decodes it to tell a complete checkpoint from a damaged
// one.
//
// Metadata keys: "format" = "pt", "cohort.version", "cohort.epoch",
// "cohort.step", "cohort.rng_state" (hex of Generator::get_state()),
// "cohort.sampler.epoch", "cohort.sampler.position", and "extra.<key>" for
// TrainingState::extra.
//
// Errors: decoding throws IoError naming the file for a missing or malformed
// key. Thread safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/checkpoint/safetensors.h"
#include "cohort/data/sampler.h"

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

// The training state encoded in / decoded from a metadata map (decoding
// throws IoError naming `path` on missing or malformed keys).
Metadata encode_training_state(const TrainingState& state);
TrainingState decode_training_state(const Metadata& metadata, const std::string& path);

}  // namespace cohort::checkpoint
