#include "cohort/checkpoint/training_state.h"

#include <charconv>

#include "cohort/base/error.h"

namespace cohort::checkpoint {
namespace {

constexpr const char* kVersion = "1";

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

}  // namespace cohort::checkpoint
