#include "cohort/data/window_dataset.h"

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::data {

WindowDataset::WindowDataset(TokenStream stream, int64_t block_size, int64_t stride)
    : stream_(std::move(stream)), block_size_(block_size), stride_(stride) {
  COHORT_CHECK(block_size_ >= 1, "WindowDataset: block_size must be >= 1, got {}", block_size_);
  COHORT_CHECK(stride_ >= 1, "WindowDataset: stride must be >= 1, got {}", stride_);
  COHORT_CHECK(stream_.size() >= block_size_ + 1,
               "WindowDataset: {} holds {} tokens, fewer than one window of block_size + 1 = {}",
               stream_.source(), stream_.size(), block_size_ + 1);
  // Windows start at 0, stride, ... up to the last start that leaves T + 1 tokens.
  size_ = (stream_.size() - block_size_ - 1) / stride_ + 1;
}

Example WindowDataset::get(int64_t index) const {
  check_index("WindowDataset::get", index, size_);
  const int64_t offset = index * stride_;
  Batch b = window_batch(stream_, std::span<const int64_t>(&offset, 1), block_size_);
  return Example{b.input.select(0, 0), b.target.select(0, 0)};
}

Batch WindowDataset::get_batch(std::span<const int64_t> indices) const {
  COHORT_CHECK(!indices.empty(), "WindowDataset::get_batch: empty index list");
  std::vector<int64_t> offsets(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    check_index("WindowDataset::get_batch", indices[i], size_);
    offsets[i] = indices[i] * stride_;
  }
  return window_batch(stream_, offsets, block_size_);
}

RandomWindowSampler::RandomWindowSampler(TokenStream stream, const WindowSampler::Options& windows,
                                         int64_t steps_per_epoch)
    : sampler_(std::move(stream), windows), steps_per_epoch_(steps_per_epoch) {
  COHORT_CHECK(steps_per_epoch_ >= 1, "RandomWindowSampler: steps_per_epoch must be >= 1, got {}",
               steps_per_epoch_);
}

std::vector<int64_t> RandomWindowSampler::indices(int64_t epoch) const {
  COHORT_CHECK(epoch >= 0, "RandomWindowSampler: epoch must be >= 0, got {}", epoch);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(size()));
  for (int64_t s = 0; s < steps_per_epoch_; ++s) {
    std::vector<int64_t> step = sampler_.offsets(epoch * steps_per_epoch_ + s);
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

int64_t default_steps_per_epoch(int64_t tokens, int64_t num_replicas, int64_t batch_size,
                                int64_t block_size) {
  const int64_t per_step = std::max<int64_t>(1, num_replicas * batch_size * block_size);
  return std::max<int64_t>(1, (tokens + per_step - 1) / per_step);
}

}  // namespace cohort::data
