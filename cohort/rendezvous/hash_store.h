// HashStore: a Store held in this process's memory, for threads of one
// process and for tests. Blocking calls wait on a condition variable.
//
// Ownership: values are copied in and out. Thread safety: every method may be
// called from any number of threads at once.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class HashStore final : public Store {
 public:
  HashStore() = default;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::set;
  using Store::wait;

  // Number of keys currently stored.
  size_t num_keys();

 private:
  // Waits with mu_ held (through lock) until every key exists.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   Duration timeout, const char* op);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

}  // namespace cohort::rendezvous
