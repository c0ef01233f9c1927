// Random numbers: cohort::Generator is a seeded Philox4x32-10 counter-based
// generator (the generator PyTorch uses on GPUs). Its whole state is (seed,
// offset), 16 bytes, so checkpoints can save and restore it exactly
// (get_state/set_state), and a fill of n elements is a pure function of
// (seed, offset, i): results do not depend on the thread count.
// There is no process-global generator (docs/design.md forbids global mutable
// state): every random function takes one explicitly.
// Thread safety: a Generator locks itself, so one generator may be shared
// between threads (draw order between threads is then up to scheduling).
// Recording and replaying draws (GeneratorRecording, GeneratorReplay below)
// is per thread, like grad mode.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort {

struct GeneratorSnapshot;

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& other);
  Generator& operator=(const Generator& other);

  // Resets to the start of the stream of `seed`.
  void manual_seed(uint64_t seed);
  // The seed draws use (under a GeneratorReplay of this generator: the
  // replayed one).
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
  // (seed, first block) of `blocks` blocks, replayed or recorded (below).
  std::pair<uint64_t, uint64_t> draw(uint64_t blocks);
  static GeneratorSnapshot* replayed(const Generator* g);

  mutable std::mutex mu_;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;  // blocks consumed
};

// ---- Replaying draws (activation checkpointing, autograd/checkpoint.h) ----
// A forward recomputed during backward must draw what its first run drew (the
// same dropout mask) and must not move the generators on, so that later draws
// are those of a run without recomputation. Generators are per module, so the
// recomputation cannot know them in advance: the first run records each one
// it draws from, the recomputation replays those states.

// A generator's state before a recorded draw; `generator` identifies it by
// address only (never dereferenced, so a destroyed generator is harmless).
struct GeneratorSnapshot {
  const Generator* generator = nullptr;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// RAII: notes, for each generator the calling thread draws from while it
// lives, the state before its first draw there (under a replay: the replayed
// state). Nested recordings each note the draws made in their lifetime.
// Draws on other threads are not seen. Not copyable; destroy in reverse order
// of creation (a scope).
class GeneratorRecording {
 public:
  GeneratorRecording();
  ~GeneratorRecording();
  GeneratorRecording(const GeneratorRecording&) = delete;
  GeneratorRecording& operator=(const GeneratorRecording&) = delete;
  // In order of first use.
  const std::vector<GeneratorSnapshot>& snapshots() const { return seen_; }

 private:
  friend class Generator;
  void note(const Generator* g, uint64_t seed, uint64_t offset);
  GeneratorRecording* outer_;
  std::vector<GeneratorSnapshot> seen_;
};

// RAII: while it lives, the calling thread's draws from each generator in
// `snapshots` start from the recorded state and advance a private copy of it;
// the generator itself is neither read nor moved. Other generators, and other
// threads, draw as usual. An inner replay hides an outer one for the
// generators both name. Not copyable; a scope.
class GeneratorReplay {
 public:
  explicit GeneratorReplay(const std::vector<GeneratorSnapshot>& snapshots);
  ~GeneratorReplay();
  GeneratorReplay(const GeneratorReplay&) = delete;
  GeneratorReplay& operator=(const GeneratorReplay&) = delete;

 private:
  friend class Generator;
  GeneratorSnapshot* find(const Generator* g);
  GeneratorReplay* outer_;
  std::vector<GeneratorSnapshot> state_;
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
