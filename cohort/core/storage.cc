#include "cohort/core/storage.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "cohort/base/error.h"

namespace cohort {
namespace {

void* raw_alloc(size_t bytes) {
  return ::operator new(bytes, std::align_val_t(Storage::kAlignment));
}
void raw_free(void* p) { ::operator delete(p, std::align_val_t(Storage::kAlignment)); }

class BlockCache {
 public:
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache();  // leaked: outlives static tensors
    return *cache;
  }

  bool enabled() const { return enabled_; }

  void* take(size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(capacity);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= capacity;
    return p;
  }

  // Returns false when the cache is full (the caller frees the block).
  bool give(void* p, size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + capacity > Storage::kCacheMaxBytes) return false;
    free_[capacity].push_back(p);
    cached_ += capacity;
    return true;
  }

  size_t cached() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) raw_free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  BlockCache() {
    const char* env = std::getenv("COHORT_STORAGE_CACHE");
    enabled_ = !(env && env[0] == '0');
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  bool enabled_ = true;
};

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
  if (capacity_ >= kCacheMinBytes && BlockCache::instance().enabled())
    data_ = BlockCache::instance().take(capacity_);
  if (!data_) data_ = raw_alloc(capacity_);
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
  if (capacity_ >= kCacheMinBytes && BlockCache::instance().enabled() &&
      BlockCache::instance().give(data_, capacity_))
    return;
  raw_free(data_);
}

void Storage::rebind(void* data) {
  COHORT_CHECK(borrowed_,
               "Storage::rebind: only a borrowed storage can be rebound ({} bytes, owned)",
               nbytes_);
  data_ = data;
}

size_t Storage::cached_bytes() { return BlockCache::instance().cached(); }

size_t Storage::live_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }

void Storage::release_cache() { BlockCache::instance().release(); }

}  // namespace cohort
