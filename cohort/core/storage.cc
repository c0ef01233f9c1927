#include "cohort/core/storage.h"

#include <atomic>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/core/device_runtime.h"
#include "cohort/core/live_bytes_peak.h"

namespace cohort {
namespace {

static_assert(Storage::kAlignment == kCacheAlignment);

BlockCache& block_cache() { return Runtime::process().storage_blocks(); }

size_t round_capacity(size_t nbytes) {
  size_t c = (nbytes + Storage::kAlignment - 1) / Storage::kAlignment * Storage::kAlignment;
  if (c == 0) c = Storage::kAlignment;
  // Round big blocks to 4 KiB so near-equal sizes share cache entries.
  if (c >= Storage::kCacheMinBytes) c = (c + 4095) / 4096 * 4096;
  return c;
}

}  // namespace

namespace {
std::atomic<size_t> g_live_bytes{0};  // a statistic only (Storage::live_bytes)
std::atomic<size_t> g_peak_live_bytes{0};

void count_live(size_t nbytes) {
  const size_t now = g_live_bytes.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = g_peak_live_bytes.load(std::memory_order_relaxed);
  while (now > peak &&
         !g_peak_live_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
}  // namespace

Storage::Storage(size_t nbytes) : Storage(nbytes, kCPU) {}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes) {
  if (device.is_cpu()) {
    capacity_ = round_capacity(nbytes);
    // The padding lets vector kernels read whole 64-byte lines at the tail.
    data_ = capacity_ >= kCacheMinBytes ? block_cache().allocate(capacity_)
                                        : aligned_allocate(capacity_);
    count_live(nbytes);  // after a throwing allocation
    return;
  }
  // Device bytes are counted by the device's allocator, not in live_bytes().
  device_ = resolve_device(device);
  DeviceRuntime& rt = device_runtime(device_, "allocating device memory");
  data_ = rt.allocate(device_.index(), nbytes, current_stream(device_));
  capacity_ = nbytes;
  borrowed_data_ = data_;
  deleter_ = [rt = &rt, index = device_.index()](void* p) { rt->deallocate(index, p); };
}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter, Device device)
    : data_(data),
      nbytes_(nbytes),
      capacity_(nbytes),
      borrowed_(true),
      borrowed_data_(data),
      deleter_(std::move(deleter)),
      device_(device) {
  if (!device_.is_cpu()) return;  // device bytes are the device allocator's to count
  count_live(nbytes);
}

Storage::~Storage() {
  if (!device_.is_cpu()) {
    if (deleter_) deleter_(borrowed_data_);
    return;
  }
  g_live_bytes.fetch_sub(nbytes_, std::memory_order_relaxed);
  if (borrowed_) {
    if (deleter_) deleter_(borrowed_data_);
    return;
  }
  if (capacity_ >= kCacheMinBytes) {
    block_cache().deallocate(data_, capacity_);
  } else {
    aligned_free(data_);
  }
}

void Storage::rebind(void* data) {
  COHORT_CHECK(borrowed_,
               "Storage::rebind: only a borrowed storage can be rebound ({} bytes, owned)",
               nbytes_);
  data_ = data;
}

size_t Storage::cached_bytes() { return block_cache().held_bytes(); }

size_t Storage::live_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }

size_t peak_live_bytes() { return g_peak_live_bytes.load(std::memory_order_relaxed); }

void reset_peak_live_bytes() {
  g_peak_live_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void Storage::release_cache() { block_cache().release(); }

}  // namespace cohort
