#include "cohort/core/storage.h"

#include <atomic>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"

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
}  // namespace

Storage::Storage(size_t nbytes) : nbytes_(nbytes), capacity_(round_capacity(nbytes)) {
  // The padding lets vector kernels read whole 64-byte lines at the tail.
  data_ =
      capacity_ >= kCacheMinBytes ? block_cache().allocate(capacity_) : aligned_allocate(capacity_);
  g_live_bytes.fetch_add(nbytes, std::memory_order_relaxed);  // after a throwing allocation
}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data),
      nbytes_(nbytes),
      capacity_(nbytes),
      borrowed_(true),
      borrowed_data_(data),
      deleter_(std::move(deleter)) {
  g_live_bytes.fetch_add(nbytes, std::memory_order_relaxed);
}

Storage::~Storage() {
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

void Storage::release_cache() { block_cache().release(); }

}  // namespace cohort
