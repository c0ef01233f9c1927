// Storage: one refcounted, 64-byte-aligned block of bytes that tensors view.
// Owned through std::shared_ptr<Storage>; tensors that are views of each other
// share one Storage. The bytes are uninitialised on creation.
//
// Large blocks (>= kCacheMinBytes) are recycled through the process
// runtime's cache of freed blocks keyed by size (base/runtime.h's
// storage_blocks): a training step allocates the same activation sizes every
// iteration, and without the cache each one is a fresh mmap whose pages fault
// in again (measured: ~20% of a Net step went to page faults and munmap). Its
// limit is RuntimeOptions::storage_cache_bytes (256 MiB; 0 turns it off, as
// COHORT_STORAGE_CACHE=0 does at the edge); it is locked.
// A Storage can also borrow memory it did not allocate (Tensor::from_blob):
// it never frees it, and calls the caller's deleter, if any, when the last
// tensor sharing it goes away.
// A Storage on a device other than the CPU (Storage(nbytes, device)) holds
// device memory from that device's caching allocator (device_runtime.h),
// taken for the calling thread's current stream and given back to it.
// Thread safety: a Storage is immutable after construction (except rebind(),
// the owner's of a borrowed block); writes to the bytes are the caller's to
// synchronise. The cache is thread safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "cohort/core/device.h"

namespace cohort {

class Storage {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMinBytes = size_t{64} << 10;

  // Allocates nbytes (0 allowed). Throws std::bad_alloc when memory runs out.
  explicit Storage(size_t nbytes);
  // nbytes on `device` (its index resolved; the CPU: as above). Throws
  // NotSupported when the device is not available, naming why.
  Storage(size_t nbytes, Device device);
  // Borrows nbytes at `data` (not copied, not freed here); `deleter`, when
  // given, is called once with `data` from the destructor.
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter, Device device = kCPU);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  bool borrowed() const { return borrowed_; }
  Device device() const { return device_; }

  // Borrowed storage only: points it at other memory of at least nbytes(),
  // keeping the Storage (and so every view of it, e.g. tensors autograd saved
  // for backward) while the bytes move. ZeRO stage 3 uses it to hold a unit's
  // gathered parameters in reused, resident buffers. The caller owns both
  // blocks, keeps `data` alive while the storage points at it, and makes sure
  // no other thread touches the bytes meanwhile. The deleter still receives
  // the pointer given at construction.
  void rebind(void* data);

  // Version counter shared by every view of this storage: the in-place
  // members of Tensor (copy_, fill_, add_, ..., and the random fills) bump
  // it, and autograd compares it with the value seen when a tensor was saved
  // for backward. Raw writes through data_ptr() are not counted.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() const { version_.fetch_add(1, std::memory_order_relaxed); }

  // Bytes currently parked in the cache (for tests and memory reports).
  static size_t cached_bytes();
  // Bytes (nbytes) of all Storages alive now, e.g. what an autograd graph
  // holds between forward and backward (memory reports, tests).
  static size_t live_bytes();
  // Returns every cached block to the system.
  static void release_cache();

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  size_t capacity_ = 0;  // bytes actually allocated (rounded up)
  bool borrowed_ = false;
  void* borrowed_data_ = nullptr;       // borrowed memory: as constructed, for the deleter
  std::function<void(void*)> deleter_;  // borrowed memory only
  Device device_;
  mutable std::atomic<uint64_t> version_{0};
};

}  // namespace cohort
