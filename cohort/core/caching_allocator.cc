#include "cohort/core/caching_allocator.h"

#include <algorithm>
#include <bit>

#include "cohort/base/error.h"

namespace cohort {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallStep = 512;

std::string mib(size_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

}  // namespace

size_t CachingAllocator::size_class(size_t nbytes) {
  if (nbytes == 0) return kSmallStep;
  if (nbytes < kSmallLimit) return (nbytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  size_t top = std::bit_floor(nbytes);
  size_t step = top / 8;
  return (nbytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(std::string name, DeviceMemory& memory)
    : name_(std::move(name)), memory_(memory) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mu_);
  for (auto& [ptr, block] : blocks_) memory_.raw_free(ptr);
}

void* CachingAllocator::take_cached(size_t size, uint64_t stream) {
  auto it = free_.find({stream, size});
  if (it == free_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  cached_ -= size;
  return p;
}

void CachingAllocator::collect_pending() {
  auto done = [&](const Pending& p) {
    return std::all_of(p.events.begin(), p.events.end(),
                       [&](const std::shared_ptr<void>& e) { return memory_.done(e); });
  };
  for (size_t i = 0; i < pending_.size();) {
    if (!done(pending_[i])) {
      ++i;
      continue;
    }
    Block& b = blocks_.at(pending_[i].ptr);
    b.users.clear();
    free_[{b.stream, b.size}].push_back(pending_[i].ptr);
    cached_ += b.size;
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

void CachingAllocator::release_cached() {
  for (auto& [key, ptrs] : free_) {
    for (void* p : ptrs) {
      memory_.raw_free(p);
      stats_.reserved -= key.second;
      ++stats_.device_frees;
      blocks_.erase(p);
    }
  }
  free_.clear();
  cached_ = 0;
}

void* CachingAllocator::allocate(size_t nbytes, const Stream& stream) {
  size_t size = size_class(nbytes);
  std::lock_guard lock(mu_);
  if (!pending_.empty()) collect_pending();
  void* p = take_cached(size, stream.id);
  if (p != nullptr) {
    ++stats_.cache_hits;
  } else {
    p = memory_.raw_alloc(size);
    if (p == nullptr && cached_ > 0) {
      ++stats_.oom_retries;
      release_cached();
      p = memory_.raw_alloc(size);
    }
    if (p == nullptr) {
      throw Error(fmt::format(
          "{}: out of memory allocating {} ({} bytes): {} allocated by cohort, {} reserved, "
          "{} waiting for other streams; the device says: {}",
          name_, mib(size), nbytes, mib(stats_.allocated), mib(stats_.reserved), pending_.size(),
          memory_.describe()));
    }
    blocks_[p] = Block{size, stream.id, {}};
    ++stats_.device_allocs;
    stats_.reserved += size;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  in_use_[p] = true;
  stats_.allocated += size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return p;
}

void CachingAllocator::deallocate(void* ptr) {
  std::lock_guard lock(mu_);
  auto it = in_use_.find(ptr);
  COHORT_CHECK(it != in_use_.end(), "{}: freeing {} which this allocator does not hold in use",
               name_, ptr);
  in_use_.erase(it);
  Block& b = blocks_.at(ptr);
  stats_.allocated -= b.size;
  if (b.users.empty()) {
    free_[{b.stream, b.size}].push_back(ptr);
    cached_ += b.size;
    return;
  }
  Pending p{ptr, {}};
  for (const Stream& s : b.users) p.events.push_back(memory_.record(s));
  pending_.push_back(std::move(p));
}

void CachingAllocator::record_stream(void* ptr, const Stream& stream) {
  std::lock_guard lock(mu_);
  COHORT_CHECK(in_use_.count(ptr) != 0, "{}: record_stream on {} which is not in use", name_, ptr);
  Block& b = blocks_.at(ptr);
  if (stream.id == b.stream) return;
  for (const Stream& s : b.users) {
    if (s == stream) return;
  }
  b.users.push_back(stream);
}

DeviceMemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  collect_pending();
  release_cached();
}

size_t CachingAllocator::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_;
}

}  // namespace cohort
