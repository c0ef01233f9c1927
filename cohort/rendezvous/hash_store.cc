#include "cohort/rendezvous/hash_store.h"

#include "cohort/base/error.h"
#include "cohort/rendezvous/store_util.h"

namespace cohort::rendezvous {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, {key}, timeout_, "HashStore get");
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    int64_t current = it == data_.end() ? 0 : detail::parse_counter(key, it->second);
    result = current + delta;
    data_[key] = detail::format_counter(result);
  }
  cv_.notify_all();
  return result;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return expected;
      data_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  cv_.notify_all();
  return result;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys) {
    if (!data_.count(k)) return false;
  }
  return true;
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, keys, timeout, "HashStore wait");
}

size_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock,
                            const std::vector<std::string>& keys, Duration timeout,
                            const char* op) {
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (!data_.count(k)) return false;
    }
    return true;
  };
  if (cv_.wait_for(lock, timeout, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!data_.count(k)) missing.push_back(k);
  }
  throw TimeoutError(detail::timeout_message(op, timeout, missing, "in-memory store"));
}

}  // namespace cohort::rendezvous
