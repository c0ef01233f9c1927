// PowerSGD gradient compression (Vogels et al. 2019, "PowerSGD: Practical
// Low-Rank Gradient Compression for Distributed Optimization"), as PyTorch
// 1.13's ddp_comm_hooks.powerSGD_hook and batched_powerSGD_hook with their
// PowerSGDState.
//
// PowerSGDHook, per bucket: each gradient viewed as an n x m matrix M (its
// first dimension by the rest) is sent as two rank-r factors, P = M Q
// (n x r, all-reduced as a sum and orthogonalised by Gram-Schmidt) and then
// Q = M^T P (m x r, all-reduced and averaged); the bucket gets P Q^T. That is
// (n + m) r numbers instead of n m. Tensors that would not shrink at least
// min_compression_rate times ((n + m) r * rate >= n m: 1-D tensors such as
// biases always) are all-reduced plainly, all of a bucket's in one
// collective, started first so that it overlaps computing P. Error feedback
// adds what compression lost last time to the next gradient (per bucket);
// warm start begins each power iteration from the previous step's Q instead
// of a fresh random one. Random Qs come from a Generator seeded with
// random_seed, advanced identically on every rank, so the ranks agree.
// Before iteration start_powerSGD_iter the hook is allreduce_hook exactly
// (the same collective on the same buffer: bitwise the same result).
// Differences from PyTorch: the uncompressed tensors' all_reduce and P's are
// started together (PyTorch chains them), and a bucket with nothing to
// compress (or nothing uncompressed) skips the empty collective.
//
// BatchedPowerSGDHook: the whole bucket, zero-padded to s * s with
// s = ceil(sqrt(numel)), as one square matrix: cheaper to compute, much less
// accurate unless r is 1 (PyTorch's advice).
//
// Ownership: the hook owns its state (per bucket: error, P, Q; the iteration
// count; the generator), sized by the buckets of the DDP it is registered
// with: one hook per DDP. Thread safety: none; the DDP calls it from the
// backward thread, one bucket at a time. Failure: bad options throw
// InvalidArgument at construction; a bucket that is not float32 or float64
// throws NotSupported when compression would start.
#pragma once

#include <cstdint>
#include <map>

#include "cohort/core/random.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"

namespace cohort::parallel {

// PyTorch's PowerSGDState arguments, with its defaults.
struct PowerSGDOptions {
  int64_t matrix_approximation_rank = 1;
  int64_t start_powerSGD_iter = 1'000;  // NOLINT(readability-identifier-naming): PyTorch's name
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  // Added to each column norm in Gram-Schmidt; 0: a zero column stays zero.
  double orthogonalization_epsilon = 0;
  uint64_t random_seed = 0;
};

// What the state keeps across iterations, and its statistics.
class PowerSGDState {
 public:
  explicit PowerSGDState(PowerSGDOptions options);
  const PowerSGDOptions& options() const { return options_; }
  // Iterations seen (counted at each iteration's last bucket).
  int64_t iter() const { return iter_; }
  // Numbers before / after compression, summed over the compressed
  // iterations (PyTorch's compression_stats()).
  int64_t total_numel_before_compression() const { return before_; }
  int64_t total_numel_after_compression() const { return after_; }
  double compression_rate() const {
    return after_ == 0 ? 0.0 : static_cast<double>(before_) / static_cast<double>(after_);
  }

 private:
  friend class PowerSGDHook;
  friend class BatchedPowerSGDHook;
  void maybe_increase_iter(const GradBucket& bucket) {
    if (bucket.is_last) ++iter_;
  }
  // The seed of the next random Q (PyTorch: rng.randint(1e9)).
  uint64_t next_seed() { return rng_.next_u64(); }

  PowerSGDOptions options_;
  int64_t iter_ = 0;
  int64_t before_ = 0, after_ = 0;
  Generator rng_;
  std::map<size_t, Tensor> error_, p_, q_;  // per bucket index
};

class PowerSGDHook final : public CommHook {
 public:
  explicit PowerSGDHook(PowerSGDOptions options = {}) : state_(options) {}
  BucketFuture run(distributed::ProcessGroup& pg, GradBucket& bucket) override;
  std::string name() const override;
  const PowerSGDState& state() const { return state_; }

 private:
  PowerSGDState state_;
};

class BatchedPowerSGDHook final : public CommHook {
 public:
  explicit BatchedPowerSGDHook(PowerSGDOptions options = {}) : state_(options) {}
  BucketFuture run(distributed::ProcessGroup& pg, GradBucket& bucket) override;
  std::string name() const override;
  const PowerSGDState& state() const { return state_; }

 private:
  PowerSGDState state_;
};

std::shared_ptr<PowerSGDHook> powersgd_hook(PowerSGDOptions options = {});
std::shared_ptr<BatchedPowerSGDHook> batched_powersgd_hook(PowerSGDOptions options = {});

// Gram-Schmidt on the columns of `m` ([n, r], contiguous, float32 or
// float64), in place: each column divided by its norm (+ epsilon; a zero
// column with epsilon 0 stays zero), then removed from the later ones.
void orthogonalize(Tensor& m, double epsilon = 0);

}  // namespace cohort::parallel
