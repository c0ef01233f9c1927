#include "cohort/base/caches.h"

#include <cstring>
#include <new>

namespace cohort {
void CacheCounters::raise_peak(size_t now) {
  size_t p = peak_.load(std::memory_order_relaxed);
  while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void CacheCounters::set_held(size_t bytes) {
  held_.store(bytes, std::memory_order_relaxed);
  raise_peak(bytes);
}

void CacheCounters::add_held(size_t bytes) {
  raise_peak(held_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

CacheStats CacheCounters::snapshot(size_t limit) const {
  CacheStats s;
  s.bytes = held_.load(std::memory_order_relaxed);
  s.peak_bytes = peak_.load(std::memory_order_relaxed);
  s.limit = limit;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  return s;
}

void* aligned_allocate(size_t bytes) {
  return ::operator new(bytes, std::align_val_t(kCacheAlignment));
}

void aligned_free(void* p) noexcept { ::operator delete(p, std::align_val_t(kCacheAlignment)); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(other.data_), capacity_(other.capacity_) {
  other.data_ = nullptr;
  other.capacity_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.capacity_ = 0;
  }
  return *this;
}

void AlignedBuffer::grow(size_t bytes) {
  // Rounded to whole cache lines: vector kernels may touch a line's tail.
  const size_t rounded = (bytes + kCacheAlignment - 1) / kCacheAlignment * kCacheAlignment;
  void* p = aligned_allocate(rounded);
  // Zero, as std::vector's growth was: no caller reads what it did not write,
  // but a stray read then sees 0, never a NaN left by someone else.
  std::memset(p, 0, rounded);
  reset();
  data_ = p;
  capacity_ = rounded;
}

void AlignedBuffer::reset() noexcept {
  if (data_ != nullptr) aligned_free(data_);
  data_ = nullptr;
  capacity_ = 0;
}

void LimitedCache::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_.store(bytes, std::memory_order_relaxed);
  trim_locked(bytes);
}

void LimitedCache::release() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked(0);
}

void* BlockCache::allocate(size_t bytes) {
  if (limit() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      counters_.sub_held(bytes);
      counters_.hit();
      return p;
    }
  }
  counters_.miss();
  return aligned_allocate(bytes);
}

void BlockCache::deallocate(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes <= limit()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (counters_.held() + bytes <= limit()) {
      try {
        free_[bytes].push_back(p);
        counters_.add_held(bytes);
        return;
      } catch (...) {
        // Out of memory growing the free list: the block is simply freed.
      }
    }
  }
  counters_.drop();
  aligned_free(p);
}

void BlockCache::trim_locked(size_t to) noexcept {
  size_t held = counters_.held();
  for (auto it = free_.begin(); it != free_.end() && held > to;) {
    while (!it->second.empty() && held > to) {
      aligned_free(it->second.back());
      it->second.pop_back();
      held -= it->first;
    }
    it = it->second.empty() ? free_.erase(it) : std::next(it);
  }
  counters_.set_held(held);
}

size_t ScratchPool::Set::bytes() const {
  size_t n = 0;
  for (const AlignedBuffer& b : buffers) n += b.capacity();
  return n;
}

std::unique_ptr<ScratchPool::Set> ScratchPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      std::unique_ptr<Set> s = std::move(free_.back());
      free_.pop_back();
      counters_.sub_held(s->bytes());
      counters_.hit();
      return s;
    }
  }
  counters_.miss();
  return std::make_unique<Set>();
}

void ScratchPool::give_back(std::unique_ptr<Set> set) noexcept {
  if (!set) return;
  const size_t bytes = set->bytes();
  std::lock_guard<std::mutex> lock(mu_);
  if (counters_.held() + bytes <= limit()) {
    try {
      free_.push_back(std::move(set));
      counters_.add_held(bytes);
      return;
    } catch (...) {
      // Out of memory growing the free list: the set is simply freed.
    }
  }
  counters_.drop();
  set.reset();
}

void ScratchPool::trim_locked(size_t to) noexcept {
  size_t held = counters_.held();
  while (!free_.empty() && held > to) {
    held -= free_.back()->bytes();
    free_.pop_back();
  }
  counters_.set_held(held);
}

}  // namespace cohort
