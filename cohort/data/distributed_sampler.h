// DistributedSampler: the share of one rank of a data set split over
// num_replicas ranks, with torch.utils.data.DistributedSampler's exact
// semantics (PyTorch 1.13), so the same (seed, epoch) gives every rank the
// same indices as in PyTorch:
//   - order: 0..n-1, or with shuffle torch.randperm(n) from a generator seeded
//     with seed + epoch (bit-identical to PyTorch's CPU generator);
//   - without drop_last the order is padded by repeating it from the start
//     until its length divides by num_replicas (every rank gets
//     ceil(n / R) indices); with drop_last the tail is dropped (floor(n / R));
//   - rank r takes positions r, r + R, r + 2R, ...
//   - pad = false (not in PyTorch's sampler; uneven inputs, for a Join,
//     parallel/join.h): without drop_last nothing is repeated either, so
//     rank r takes the positions r, r + R, ... below n: ceil(n / R) indices
//     on the first n % R ranks, floor(n / R) on the others.
// As in PyTorch the sampler never moves to the next epoch by itself: call
// set_epoch(epoch) before each epoch. Iterating a shuffling sampler again
// without changing the epoch repeats the same order -- a known trap -- and
// logs a warning (once per sampler).
// Thread safety: none (see sampler.h).
#pragma once

#include "cohort/data/sampler.h"

namespace cohort::data {

class DistributedSampler final : public Sampler {
 public:
  struct Options {
    int64_t num_replicas = 1;
    int64_t rank = 0;
    bool shuffle = true;
    uint64_t seed = 0;
    bool drop_last = false;
    bool pad = true;  // without drop_last: repeat indices so that every rank gets ceil(n / R)
  };

  // Throws InvalidArgument unless num_replicas >= 1, 0 <= rank < num_replicas
  // and dataset_size >= 0.
  DistributedSampler(int64_t dataset_size, const Options& options);

  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

  const Options& options() const { return options_; }
  // Indices over all ranks per epoch (num_samples * num_replicas).
  int64_t total_size() const {
    return !options_.drop_last && !options_.pad ? dataset_size_
                                                : num_samples_ * options_.num_replicas;
  }
  // Whether the same-epoch warning has been logged.
  bool warned_repeated_epoch() const { return warned_; }

 protected:
  bool advances_epoch_itself() const override { return false; }
  void on_begin_epoch(bool resumed) override;

 private:
  int64_t dataset_size_;
  Options options_;
  int64_t num_samples_;
  int64_t last_begun_epoch_ = -1;
  bool warned_ = false;
};

}  // namespace cohort::data
