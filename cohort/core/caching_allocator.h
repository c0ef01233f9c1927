// CachingAllocator: the device memory cache behind every non-CPU tensor, as
// PyTorch's CUDA caching allocator: a training step asks for the same sizes
// every iteration, and a device malloc/free per tensor would synchronise the
// device and cost more than many kernels. Freed blocks are kept, by stream
// and size class, and handed out again; nothing goes back to the device until
// empty_cache() or until a request fails, when the cache is emptied and the
// request tried once more.
//
// Device-agnostic on purpose: the device calls (malloc, free, events) come
// through DeviceMemory, which the CUDA layer implements with cudaMalloc and
// events, and tests with a double, so that the bookkeeping is tested on
// machines without a GPU.
//
// Size classes: below 1 MiB multiples of 512 bytes; from 1 MiB up, multiples of
// an eighth of the enclosing power of two (at most 12.5% over the request),
// so near-equal sizes share blocks. A block is reused at once on the stream it
// was allocated on (stream order makes that safe); a block that
// record_stream() marked as used by other streams waits, after its free,
// until events recorded on those streams have completed.
// Thread safety: every member is safe to call from any thread.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cohort/core/device_runtime.h"

namespace cohort {

// The device side of a CachingAllocator.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Null when the device is out of memory; throws for other failures.
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr) noexcept = 0;
  // What the device says about its memory, for the out-of-memory message.
  virtual std::string describe() = 0;
  // An event on `stream`, and whether it has completed (never blocks).
  virtual std::shared_ptr<void> record(const Stream& stream) = 0;
  virtual bool done(const std::shared_ptr<void>& event) = 0;
};

class CachingAllocator {
 public:
  // `name` ("cuda:0") goes into messages; `memory` must outlive the allocator.
  CachingAllocator(std::string name, DeviceMemory& memory);
  ~CachingAllocator();  // returns every cached block; blocks in use are the owners' bug
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nbytes (0 gives a distinct 512-byte block) for use on `stream`.
  void* allocate(size_t nbytes, const Stream& stream);
  // ptr must come from allocate() and not be freed yet (else InvalidArgument).
  void deallocate(void* ptr);
  void record_stream(void* ptr, const Stream& stream);

  DeviceMemoryStats stats() const;
  void reset_peak();
  // Returns cached blocks (those waiting for events that are done too).
  void empty_cache();
  size_t cached_bytes() const;

  static size_t size_class(size_t nbytes);

 private:
  struct Block {
    size_t size = 0;
    uint64_t stream = 0;
    std::vector<Stream> users;  // other streams (record_stream)
  };
  struct Pending {
    void* ptr;
    std::vector<std::shared_ptr<void>> events;
  };
  void* take_cached(size_t size, uint64_t stream);
  void collect_pending();  // mu_ held
  void release_cached();   // mu_ held

  std::string name_;
  DeviceMemory& memory_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;  // every block obtained from the device
  std::unordered_map<void*, bool> in_use_;
  // (stream, size) -> free blocks
  std::map<std::pair<uint64_t, size_t>, std::vector<void*>> free_;
  std::vector<Pending> pending_;
  size_t cached_ = 0;
  DeviceMemoryStats stats_;
};

}  // namespace cohort
