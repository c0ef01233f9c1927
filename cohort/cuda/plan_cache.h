// A bounded cache of per-shape plans (cuBLASLt descriptors and the chosen
// algorithm, cuDNN descriptors and algorithms), so that a training loop that
// runs the same shapes every step builds and searches once per shape instead
// of on every call. Least recently used entries go first when the cache is
// full; hits and misses are counted, so that tests and benchmarks can see the
// search is not rerun.
// Key: equality-comparable, with a Hash; plans are shared_ptr so that an
// entry evicted while a caller still uses it stays alive until that caller is
// done.
// Thread safety: every member may be called from any thread (one mutex).
// The plans themselves are not made safe by it: a plan a caller mutates
// (descriptor attributes set per call) belongs in a per-thread cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace cohort::cuda {

struct PlanCacheStats {
  int64_t hits = 0, misses = 0, evictions = 0;
  size_t size = 0;
};

template <class Key, class Plan, class Hash>
class PlanCache {
 public:
  explicit PlanCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The plan for `key` (a hit), or the one make() builds, stored (a miss).
  // make() runs without the lock held: it may be slow (an algorithm search)
  // and may throw, leaving the cache as it was.
  template <class Make>
  std::shared_ptr<Plan> get(const Key& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        ++stats_.hits;
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
      ++stats_.misses;
    }
    std::shared_ptr<Plan> plan = make();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;  // another thread built it meanwhile
    order_.emplace_front(key, plan);
    index_.emplace(key, order_.begin());
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++stats_.evictions;
    }
    return plan;
  }

  PlanCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    PlanCacheStats s = stats_;
    s.size = order_.size();
    return s;
  }

  size_t capacity() const { return capacity_; }

  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    order_.clear();
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<Plan>>;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
  PlanCacheStats stats_;
};

// Hash of a key made only of int64_t fields (no padding bytes, so that its
// object representation is its value).
template <class Key>
struct Int64FieldsHash {
  size_t operator()(const Key& k) const {
    static_assert(sizeof(Key) % sizeof(int64_t) == 0);
    return std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(&k), sizeof(Key)));
  }
};

}  // namespace cohort::cuda
