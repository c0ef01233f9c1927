// Token windows as a Dataset and a Sampler, so that a language model trains
// through the same DataLoader, sharding and checkpoint machinery as the image
// models (the Trainer, train/trainer.h):
//   WindowDataset   example i is the window starting at i * stride: input =
//                   tokens[o, o + T), target = tokens[o + 1, o + T + 1) (int64
//                   [T] each; batches [B, T]). stride 1 makes the index the
//                   offset itself (what RandomWindowSampler draws); stride T
//                   gives non-overlapping windows (evaluation, as EvalWindows).
//   RandomWindowSampler  the offsets WindowSampler (window_sampler.h) draws,
//                   epoch by epoch: an epoch is `steps_per_epoch` steps of B
//                   offsets each (per rank), and step s of epoch e is the
//                   sampler's global step e * steps_per_epoch + s, so the
//                   batches are nanoGPT's get_batch draws, rank r holding its
//                   slice of one global draw, and a resumed run (its epoch and
//                   position) continues the same stream. Like
//                   DistributedSampler, the training loop calls set_epoch().
//
// default_steps_per_epoch: one epoch sees about as many tokens as the stream
// holds (ceil(tokens / (R * B * T)), at least 1).
//
// Thread safety: WindowDataset is immutable (const calls from any thread); a
// sampler belongs to one DataLoader. Failures: InvalidArgument naming the
// values (block size, stride, a stream too short for one window).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/data/dataset.h"
#include "cohort/data/sampler.h"
#include "cohort/data/token_corpus.h"
#include "cohort/data/window_sampler.h"

namespace cohort::data {

class WindowDataset final : public Dataset {
 public:
  WindowDataset(TokenStream stream, int64_t block_size, int64_t stride);

  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;

  int64_t block_size() const { return block_size_; }
  int64_t stride() const { return stride_; }
  const TokenStream& stream() const { return stream_; }

 private:
  TokenStream stream_;
  int64_t block_size_;
  int64_t stride_;
  int64_t size_;
};

class RandomWindowSampler final : public Sampler {
 public:
  // `windows` sets B, T, the seed and the rank's slice; the stream is the
  // training stream (a WindowDataset over it with stride 1 maps the offsets
  // to batches).
  RandomWindowSampler(TokenStream stream, const WindowSampler::Options& windows,
                      int64_t steps_per_epoch);

  int64_t size() const override { return steps_per_epoch_ * sampler_.options().batch_size; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 protected:
  bool advances_epoch_itself() const override { return false; }

 private:
  WindowSampler sampler_;
  int64_t steps_per_epoch_;
};

int64_t default_steps_per_epoch(int64_t tokens, int64_t num_replicas, int64_t batch_size,
                                int64_t block_size);

}  // namespace cohort::data
