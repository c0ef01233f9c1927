// Random numbers: cohort::Generator is a seeded Philox4x32-10 counter-based
// generator (the generator PyTorch uses on GPUs). Its whole state is (seed,
// offset), 16 bytes, so checkpoints can save and restore it exactly
// (get_state/set_state), and a fill of n elements is a pure function of
// (seed, offset, i): results do not depend on the thread count.
// There is no process-global generator (docs/design.md forbids global mutable
// state): every random function takes one explicitly.
// Thread safety: a Generator locks itself, so one generator may be shared
// between threads (draw order between threads is then up to scheduling).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& other);
  Generator& operator=(const Generator& other);

  // Resets to the start of the stream of `seed`.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // Serialized state (versioned, 20 bytes); set_state throws InvalidArgument
  // on a blob of the wrong size or version.
  std::vector<uint8_t> get_state() const;
  void set_state(const std::vector<uint8_t>& state);

  // Reserves `blocks` 128-bit Philox blocks and returns the first block index.
  uint64_t reserve(uint64_t blocks);
  // Next raw 64-bit value (uses one block).
  uint64_t next_u64();

 private:
  mutable std::mutex mu_;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;  // blocks consumed
};

// The Philox4x32-10 bijection: four 32-bit outputs for (block, seed).
std::array<uint32_t, 4> philox4x32(uint64_t block, uint64_t seed);

// In-place fills of floating tensors (any layout).
Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen);
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen);
// New tensors.
Tensor rand(const Shape& sizes, Generator& gen, DType dtype = DType::kFloat32);   // [0, 1)
Tensor randn(const Shape& sizes, Generator& gen, DType dtype = DType::kFloat32);  // N(0, 1)
// Integers uniform in [lo, hi).
Tensor randint(int64_t lo, int64_t hi, const Shape& sizes, Generator& gen,
               DType dtype = DType::kInt64);
// 1 with probability p (elementwise p in [0, 1]), else 0; same dtype as p.
Tensor bernoulli(const Tensor& p, Generator& gen);
Tensor bernoulli(const Shape& sizes, double p, Generator& gen, DType dtype = DType::kFloat32);
// A uniformly random permutation of [0, n) (int64).
Tensor randperm(int64_t n, Generator& gen);

}  // namespace cohort
