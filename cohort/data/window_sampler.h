// Windows of consecutive tokens for next-token prediction, as nanoGPT's
// get_batch: a window of block_size + 1 tokens starting at offset o gives
// input = tokens[o, o + T) and target = tokens[o + 1, o + T + 1) (T =
// block_size), both int64 [B, T] in a Batch (dataset.h).
//
// WindowSampler draws training windows at random offsets. The offsets of step
// s are, bit for bit, PyTorch's
//   torch.randint(n - T, (R * B,), generator=torch.Generator().manual_seed(seed + s))
// (n = stream size, R = num_replicas, B = batch_size), and rank r takes the
// slice [r * B, (r + 1) * B). What this guarantees:
//   - reproducible: the batch of step s is a pure function of (stream, seed,
//     R, B, T, s); batch(s) can be recomputed in any order;
//   - rank sharding: at every step the R ranks' batches, concatenated in rank
//     order, are exactly the batch that one process (R = 1) with batch size
//     R * B draws at that step -- the single-process baseline of data
//     parallelism. The ranks' draws are disjoint slices of one draw (the
//     windows they name may coincide by chance, as two draws of one process
//     may);
//   - resumable: the state is the step count; set_step(s) after a restart
//     continues the same stream, so a run resumed at step s sees the batches
//     an uninterrupted run would have seen.
// Offsets are drawn with replacement, as nanoGPT and llm.c's random mode do.
//
// EvalWindows walks a (validation) stream deterministically: window k starts at
// k * T (non-overlapping inputs; window k's last target is window k + 1's
// first input), there are W = (n - 1) / T of them, and global batch g holds
// windows [g * R * B, (g + 1) * R * B), of which rank r takes [r * B, (r + 1)
// * B). Every rank has the same num_batches() (so a collective per batch
// cannot hang), the last batch may be short on some ranks and even empty
// ([0, T]); over all ranks the batches cover windows [0, num_windows()) once.
// max_batches > 0 keeps the first max_batches global batches (the same prefix
// whatever R is only when R * B is the same). To average a loss, sum loss *
// batch.size() and batch.size() over batches and ranks.
//
// Failures: InvalidArgument naming the stream and values when the options are
// out of range or the stream holds fewer than block_size + 1 tokens (one
// window), or a step/batch index is negative/out of range.
// Thread safety: const members may run on any number of threads; next() and
// set_step() need one owner.
#pragma once

#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include "cohort/data/dataset.h"
#include "cohort/data/token_corpus.h"

namespace cohort::data {

// The windows starting at `offsets` as a batch: input int64 [B, T] =
// tokens[o, o + T), target int64 [B, T] = tokens[o + 1, o + T + 1). Each
// offset must be in [0, stream.size() - T - 1].
Batch window_batch(const TokenStream& stream, std::span<const int64_t> offsets, int64_t block_size);

// torch.randint(high, (n,), generator=torch.Generator().manual_seed(seed)) on
// the CPU, bit for bit (mt19937 seeded with the low 32 bits; one 32-bit draw
// modulo high per value, two draws when high >= 2^32).
std::vector<int64_t> torch_cpu_randint(int64_t high, int64_t n, uint64_t seed);

class WindowSampler {
 public:
  struct Options {
    int64_t batch_size = 16;   // B, per rank
    int64_t block_size = 128;  // T
    uint64_t seed = 0;
    int64_t num_replicas = 1;  // R
    int64_t rank = 0;
  };

  WindowSampler(TokenStream stream, const Options& options);

  // This rank's B window offsets at `step` (>= 0).
  std::vector<int64_t> offsets(int64_t step) const;
  // This rank's batch at `step`: input and target int64 [B, T].
  Batch batch(int64_t step) const;
  // batch(step()), then step() + 1.
  Batch next();

  // The number of batches next() has returned (or set_step's value): what a
  // checkpoint saves to resume the stream.
  int64_t step() const { return step_; }
  void set_step(int64_t step);

  // Possible window starts: stream.size() - block_size.
  int64_t num_offsets() const { return stream_.size() - options_.block_size; }
  const TokenStream& stream() const { return stream_; }
  const Options& options() const { return options_; }

 private:
  TokenStream stream_;
  Options options_;
  int64_t step_ = 0;
};

class EvalWindows {
 public:
  struct Options {
    int64_t batch_size = 16;   // B, per rank
    int64_t block_size = 128;  // T
    int64_t num_replicas = 1;  // R
    int64_t rank = 0;
    int64_t max_batches = 0;  // > 0: at most this many (global) batches
  };

  EvalWindows(TokenStream stream, const Options& options);

  // Batches per rank (the same on every rank).
  int64_t num_batches() const { return num_batches_; }
  // Windows over all ranks and batches.
  int64_t num_windows() const { return num_windows_; }
  // This rank's window offsets in batch `index` (0 <= index < num_batches();
  // B or fewer, possibly none in the last batch).
  std::vector<int64_t> offsets(int64_t index) const;
  // This rank's batch `index`: int64 [b, T] with b = offsets(index).size().
  Batch batch(int64_t index) const;

  // Range-for over this rank's batches: for (const Batch& b : eval) ...
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator(const EvalWindows* owner, int64_t index) : owner_(owner), index_(index) {}
    Batch operator*() const { return owner_->batch(index_); }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return index_ == o.index_; }

   private:
    const EvalWindows* owner_;
    int64_t index_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, num_batches_}; }

  const TokenStream& stream() const { return stream_; }
  const Options& options() const { return options_; }

 private:
  TokenStream stream_;
  Options options_;
  int64_t num_windows_ = 0;
  int64_t num_batches_ = 0;
};

}  // namespace cohort::data
