// Samplers decide the order in which a DataLoader visits a data set, one
// epoch at a time, as torch.utils.data samplers. A sampler's order for an
// epoch is a pure function of its settings and the epoch number (indices()),
// so a run restored from a checkpoint replays exactly the same order: the
// sampler's state is just (epoch, position), position being how many indices
// of the current epoch the consumer has already taken.
//
// The DataLoader drives the bookkeeping: begin_epoch() at the start of an
// iteration (returns the indices still to visit), advance() as batches reach
// the consumer, end_epoch() when the iteration completes. Sequential and
// random samplers move to the next epoch themselves (as PyTorch's
// RandomSampler draws a new permutation per iteration); DistributedSampler
// does not -- the training loop calls set_epoch(), as in PyTorch. An
// iteration abandoned midway (a break out of the loop) neither completes nor
// advances the epoch: the next iteration starts the same epoch from 0 (or from
// a position loaded with load_state()).
//
// Thread safety: none; a sampler belongs to one DataLoader and is used on the
// consumer's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::data {

// What a checkpoint stores to continue the same data order.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // indices of `epoch` already consumed
  bool operator==(const SamplerState&) const = default;
};

class Sampler {
 public:
  virtual ~Sampler() = default;

  // Number of indices one epoch yields.
  virtual int64_t size() const = 0;
  // The full order of `epoch` (size() indices); pure.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;

  // Sets the epoch the next iteration uses. Changing it drops a resume
  // position; setting the same epoch keeps it (so a training loop that
  // calls set_epoch(e) after load_state({e, p}) resumes at p).
  virtual void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }

  SamplerState state() const { return SamplerState{epoch_, position_}; }
  // The next begin_epoch() starts epoch `state.epoch` at `state.position`.
  // Throws InvalidArgument on a negative epoch or a position outside
  // [0, size()].
  void load_state(const SamplerState& state);

  // ---- driven by the DataLoader ----
  // Starts an iteration: the indices of the current epoch from the resume
  // position (or from 0 when none was loaded).
  std::vector<int64_t> begin_epoch();
  // The consumer has taken n more indices.
  void advance(int64_t n);
  // The iteration completed: epoch + 1 and position 0, or, for samplers that
  // leave epochs to set_epoch(), position = size() (the epoch is used up; a
  // new iteration without set_epoch() or load_state() starts it over).
  void end_epoch();

 protected:
  // Whether end_epoch() moves to the next epoch.
  virtual bool advances_epoch_itself() const { return true; }
  // Hook at the start of each iteration (resumed: a loaded state is used).
  virtual void on_begin_epoch(bool resumed) {}

 private:
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  bool resume_pending_ = false;
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A uniformly random permutation of [0, n) per epoch: the permutation
// PyTorch's torch.randperm(n) draws from a CPU generator seeded with
// seed + epoch -- the same one DistributedSampler shuffles with. So the order
// depends only on (seed, epoch), and a single process with batch size R * B
// visits, step by step, exactly the samples that R DistributedSampler ranks
// (same seed, shuffle, no padding) visit with batch size B each: the
// baseline that data-parallel training is compared against.
class RandomSampler final : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// torch.randperm(n, generator=g) on the CPU with g = torch.Generator()
// .manual_seed(seed), bit for bit (PyTorch's CPU generator is an mt19937
// seeded with the low 32 bits; randperm swaps element i with i + mt() % (n-i)).
std::vector<int64_t> torch_cpu_randperm(int64_t n, uint64_t seed);

}  // namespace cohort::data
