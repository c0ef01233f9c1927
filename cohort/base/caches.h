// The caches the process runtime owns (runtime.h), each with a byte limit and
// statistics:
//   BlockCache   freed blocks kept for reuse, by size (Storage's large blocks:
//                a training step allocates the same sizes every iteration);
//   ScratchPool  sets of grow-only scratch buffers leased to one call at a
//                time (conv2d's batch-16 kernels), reused whichever thread
//                the next call runs on.
// A limit is enforced when memory comes back: a block or set that would take
// its cache over the limit is freed instead of kept, and lowering a limit
// frees what is held above it at once. Memory in use is never counted
// against a limit, so a limit never makes an allocation fail.
// Ownership: a cache owns the blocks it holds; a block handed out belongs to
// the caller until it is given back (or freed with aligned_free).
// Thread safety: every member may be called from any thread at once (a lock
// around the free lists; statistics are read without it and may be a moment
// old).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace cohort {

// What a cache holds and how it has been used since the process started.
struct CacheStats {
  size_t bytes = 0;       // held now for reuse (thread buffers: held by live threads)
  size_t peak_bytes = 0;  // the most held at once
  size_t limit = 0;       // the limit in force (thread buffers: per buffer)
  uint64_t hits = 0;      // requests served from what was held
  uint64_t misses = 0;    // requests that allocated (thread buffers: times one grew)
  uint64_t dropped = 0;   // blocks freed instead of kept because of the limit
};

// The counters behind CacheStats, kept as relaxed atomics so that they can be
// read without the cache's lock.
class CacheCounters {
 public:
  void hit() { hits_.fetch_add(1, std::memory_order_relaxed); }
  void miss() { misses_.fetch_add(1, std::memory_order_relaxed); }
  void drop() { dropped_.fetch_add(1, std::memory_order_relaxed); }
  size_t held() const { return held_.load(std::memory_order_relaxed); }
  void set_held(size_t bytes);  // and the peak
  void add_held(size_t bytes);  // and the peak
  void sub_held(size_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }
  CacheStats snapshot(size_t limit) const;

 private:
  void raise_peak(size_t now);

  std::atomic<size_t> held_{0}, peak_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0}, dropped_{0};
};

// Memory aligned to kCacheAlignment (a cache line, and what vector loads want).
// aligned_allocate throws std::bad_alloc when memory runs out.
inline constexpr size_t kCacheAlignment = 64;
void* aligned_allocate(size_t bytes);
void aligned_free(void* p) noexcept;

// One grow-only block of aligned bytes. Growing does not keep the contents;
// new bytes are zero. Not thread safe (one owner at a time).
class AlignedBuffer {
 public:
  constexpr AlignedBuffer() = default;
  ~AlignedBuffer() { reset(); }
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // At least `bytes` of memory (grown when smaller).
  void* reserve(size_t bytes) {
    if (bytes > capacity_) grow(bytes);
    return data_;
  }
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  // Frees the memory.
  void reset() noexcept;

 private:
  void grow(size_t bytes);

  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// What BlockCache and ScratchPool share: a lock around the held entries, a
// limit and the counters.
class LimitedCache {
 public:
  LimitedCache(const LimitedCache&) = delete;
  LimitedCache& operator=(const LimitedCache&) = delete;

  // Sets the limit (0: keep nothing) and frees what is held above it.
  void set_limit(size_t bytes);
  // Frees everything held.
  void release() noexcept;
  size_t held_bytes() const { return counters_.held(); }
  CacheStats stats() const { return counters_.snapshot(limit()); }

 protected:
  explicit LimitedCache(size_t limit) : limit_(limit) {}
  ~LimitedCache() = default;
  size_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // Frees held entries until at most `to` bytes are held; called under mu_.
  virtual void trim_locked(size_t to) noexcept = 0;

  mutable std::mutex mu_;
  CacheCounters counters_;

 private:
  std::atomic<size_t> limit_;
};

// Freed blocks by exact size. The caller rounds sizes so that near sizes
// meet (Storage rounds to 4 KiB).
class BlockCache final : public LimitedCache {
 public:
  explicit BlockCache(size_t limit) : LimitedCache(limit) {}
  ~BlockCache() { release(); }

  // A block of `bytes`: a held one when there is one (a hit), else a new one.
  void* allocate(size_t bytes);
  // Keeps the block for reuse, or frees it when that would exceed the limit.
  void deallocate(void* p, size_t bytes) noexcept;

 private:
  void trim_locked(size_t to) noexcept override;

  std::unordered_map<size_t, std::vector<void*>> free_;  // by size, under mu_
};

// Leases of kBuffers scratch buffers each: a kernel call takes a set, grows
// the buffers it needs, and gives the set back, so steady-state training
// reuses warm memory instead of faulting in fresh pages every step.
// Concurrent (or nested) leases get different sets; the pool keeps as many
// sets as the limit allows.
class ScratchPool final : public LimitedCache {
 public:
  static constexpr int kBuffers = 4;
  struct Set {
    std::array<AlignedBuffer, kBuffers> buffers;
    size_t bytes() const;
  };

  explicit ScratchPool(size_t limit) : LimitedCache(limit) {}

  // A held set (a hit) or a new, empty one (a miss).
  std::unique_ptr<Set> acquire();
  // Keeps the set for the next lease, or frees it when that would exceed the limit.
  void give_back(std::unique_ptr<Set> set) noexcept;

 private:
  void trim_locked(size_t to) noexcept override;

  std::vector<std::unique_ptr<Set>> free_;  // under mu_
};

}  // namespace cohort
