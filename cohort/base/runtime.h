// Runtime: the one object that owns what cohort keeps for the whole process
// between calls (DESIGN rule 11), each part with a limit and statistics:
//   storage_blocks  freed tensor storage of >= 64 KiB kept for reuse
//                   (core/storage.h; without it every activation is a fresh
//                   mmap whose pages fault in again, ~20 % of a Net step);
//   kernel_scratch  scratch sets leased to one kernel call at a time
//                   (conv2d's batch-16 kernels);
//   thread buffers  each thread's own grow-only buffers (GEMM packing, bf16
//                   row scratch; ThreadBuffer below), looked up without a lock;
//   thread_pool     parallel_for's workers and the process default budget.
// Limits come from RuntimeOptions, set by the program's edge (the cohort CLI,
// or the env:// bootstrap from COHORT_STORAGE_CACHE and COHORT_NUM_THREADS;
// docs/configuration.md). Library code reads and uses the runtime; it never
// configures it.
//
// Seam for what a later layer adds (the CUDA runtime's device allocators,
// pinned host pool and streams): it attaches a RuntimeResource, which then
// shows in stats() and is emptied by release_caches(); its limits are its own
// options, set at the same edge.
//
// Ownership: Runtime::process() is created on first use and never destroyed,
// so tensors destroyed during static destruction can still return blocks.
// Thread safety: every member may be called from any thread at once;
// configure() while kernels run is allowed (a new limit applies to memory as
// it comes back). A forked child starts a fresh thread pool (it inherits none
// of the parent's threads) and keeps the caches.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/base/caches.h"
#include "cohort/base/thread_pool.h"

namespace cohort {

struct RuntimeOptions {
  // Freed storage blocks kept for reuse; 0 turns the cache off.
  size_t storage_cache_bytes = size_t{256} << 20;
  // Idle kernel scratch sets kept for reuse; 0 keeps none.
  size_t kernel_scratch_bytes = size_t{256} << 20;
  // A thread buffer bigger than this after a use is freed instead of kept
  // (per buffer; GEMM packing needs about 3.5 MiB per thread).
  size_t thread_buffer_bytes = size_t{64} << 20;
  // The default intra-op budget of threads that set none (parallel.h);
  // 0: the number of online CPUs.
  int num_threads = 0;
  // How long the host waits for device work (a copy to the host, a stream
  // synchronisation) before TimeoutError: a hung kernel or a collective
  // whose peer died must not hang the process (core/device_runtime.h).
  double device_wait_timeout_s = 300;
  // Attention on a GPU through cuDNN's fused flash attention where it takes
  // the shape (cuda/cudnn_attention.h); false: cohort's own kernel always.
  bool cudnn_attention = true;
};

// Something a later layer keeps process-wide (a device allocator's cache, a
// pinned host pool), attached to the runtime so that it is counted and
// released with the rest.
class RuntimeResource {
 public:
  virtual ~RuntimeResource() = default;
  virtual std::string name() const = 0;
  virtual CacheStats stats() const = 0;
  // Frees what it holds for reuse (never what is in use). Must not throw.
  virtual void release_cached() noexcept = 0;
};

struct RuntimeStats {
  CacheStats storage_blocks;
  CacheStats kernel_scratch;
  CacheStats thread_buffers;  // hits are not counted (a shared counter would cost the hot path)
  ThreadPoolStats thread_pool;
  std::vector<std::pair<std::string, CacheStats>> resources;  // attached, in order
};

class Runtime {
 public:
  static Runtime& process();

  // Applies new limits (what is held above one is freed now) and the default
  // thread budget. Throws InvalidArgument on a negative num_threads.
  void configure(const RuntimeOptions& options);
  RuntimeOptions options() const;
  RuntimeStats stats() const;
  // Frees everything held for reuse: storage blocks, scratch sets and the
  // attached resources' caches (thread buffers are freed by their threads).
  void release_caches();
  void attach(std::shared_ptr<RuntimeResource> resource);

  BlockCache& storage_blocks() { return storage_blocks_; }
  ScratchPool& kernel_scratch() { return kernel_scratch_; }
  ThreadPool& thread_pool() { return *thread_pool_; }
  size_t thread_buffer_limit() const {
    return thread_buffer_limit_.load(std::memory_order_relaxed);
  }
  CacheCounters& thread_buffer_counters() { return thread_buffers_; }

 private:
  Runtime();

  BlockCache storage_blocks_;
  ScratchPool kernel_scratch_;
  CacheCounters thread_buffers_;
  std::atomic<size_t> thread_buffer_limit_;
  std::atomic<double> device_wait_timeout_s_{RuntimeOptions{}.device_wait_timeout_s};
  std::atomic<bool> cudnn_attention_{RuntimeOptions{}.cudnn_attention};
  std::unique_ptr<ThreadPool> thread_pool_;
  mutable std::mutex mu_;  // guards resources_
  std::vector<std::shared_ptr<RuntimeResource>> resources_;
};

// RAII: configures the process runtime for a scope (tests, benchmarks) and
// restores the options it had.
class RuntimeOptionsGuard {
 public:
  explicit RuntimeOptionsGuard(const RuntimeOptions& options);
  ~RuntimeOptionsGuard();
  RuntimeOptionsGuard(const RuntimeOptionsGuard&) = delete;
  RuntimeOptionsGuard& operator=(const RuntimeOptionsGuard&) = delete;

 private:
  RuntimeOptions saved_;
};

// One thread's grow-only scratch buffer, kept between uses, for a
// `thread_local` in a kernel: get() is a size check on this thread's own
// memory (no lock, no shared write unless it grows), and done() after each
// use frees it when it is bigger than the runtime's thread_buffer_bytes.
// Growing does not keep the contents (new bytes are zero). Bytes held are
// counted in the runtime's thread_buffers statistics.
class ThreadBuffer {
 public:
  constexpr ThreadBuffer() = default;
  ~ThreadBuffer();
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  // At least `count` elements of T, 64-byte aligned.
  template <class T>
  T* get(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes > buf_.capacity()) grow(bytes);
    return static_cast<T*>(buf_.data());
  }
  // Ends a use: frees the memory when it is over the limit.
  void done() noexcept;
  size_t capacity() const { return buf_.capacity(); }

 private:
  void grow(size_t bytes);

  AlignedBuffer buf_;
};

// One use of a ThreadBuffer as `count` elements of T: done() when it ends,
// whether the use returns or throws.
template <class T>
class ThreadBufferUse {
 public:
  ThreadBufferUse(ThreadBuffer& buf, size_t count) : buf_(buf), data_(buf.get<T>(count)) {}
  ~ThreadBufferUse() { buf_.done(); }
  ThreadBufferUse(const ThreadBufferUse&) = delete;
  ThreadBufferUse& operator=(const ThreadBufferUse&) = delete;

  T* data() const { return data_; }
  T& operator[](size_t i) const { return data_[i]; }

 private:
  ThreadBuffer& buf_;
  T* data_;
};

}  // namespace cohort
