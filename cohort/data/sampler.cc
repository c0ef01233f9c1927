#include "cohort/data/sampler.h"

#include <numeric>
#include <random>

#include "cohort/base/error.h"

namespace cohort::data {

void Sampler::set_epoch(int64_t epoch) {
  COHORT_CHECK(epoch >= 0, "Sampler::set_epoch: epoch must be >= 0, got {}", epoch);
  if (epoch != epoch_) {
    epoch_ = epoch;
    position_ = 0;
    resume_pending_ = false;
  }
}

void Sampler::load_state(const SamplerState& state) {
  COHORT_CHECK(state.epoch >= 0, "Sampler::load_state: epoch must be >= 0, got {}", state.epoch);
  COHORT_CHECK(state.position >= 0 && state.position <= size(),
               "Sampler::load_state: position {} is outside [0, {}] (the sampler's size)",
               state.position, size());
  epoch_ = state.epoch;
  position_ = state.position;
  resume_pending_ = true;
}

std::vector<int64_t> Sampler::begin_epoch() {
  const bool resumed = resume_pending_;
  if (!resumed) position_ = 0;
  resume_pending_ = false;
  on_begin_epoch(resumed);
  std::vector<int64_t> all = indices(epoch_);
  COHORT_ASSERT(static_cast<int64_t>(all.size()) == size());
  all.erase(all.begin(), all.begin() + position_);
  return all;
}

void Sampler::advance(int64_t n) {
  COHORT_ASSERT(n >= 0 && position_ + n <= size());
  position_ += n;
}

void Sampler::end_epoch() {
  resume_pending_ = false;
  if (advances_epoch_itself()) {
    ++epoch_;
    position_ = 0;
  } else {
    // Stays "epoch e, all consumed": a checkpoint taken now resumes after
    // this epoch even if the caller records e as the current epoch.
    position_ = size();
  }
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  COHORT_CHECK(n >= 0, "SequentialSampler: n must be >= 0, got {}", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  COHORT_CHECK(n >= 0, "RandomSampler: n must be >= 0, got {}", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return torch_cpu_randperm(n_, seed_ + static_cast<uint64_t>(epoch));
}

std::vector<int64_t> torch_cpu_randperm(int64_t n, uint64_t seed) {
  std::mt19937 mt(static_cast<uint32_t>(seed));
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), int64_t{0});
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(mt() % static_cast<uint64_t>(n - i));
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
  }
  return r;
}

}  // namespace cohort::data
