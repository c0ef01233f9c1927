// FileStore: a Store kept in one file that several processes on one host (or
// on a shared file system with working flock) open by path. The file is an
// append-only log of set/delete records; every operation takes flock on it,
// reads the records other processes appended since its last look, and
// appends its own. Blocking calls poll the file (1 ms, backing off to 20 ms)
// until their timeout.
//
// The file is not removed by the store: use a fresh path per job (a stale
// file from an earlier job would hand out its keys). A record torn by a
// process killed mid-write is cut off by the next writer.
//
// Ownership: owns its file descriptor. Thread safety: every method may be
// called from many threads at once (a mutex orders threads, flock processes).
#pragma once

#include <map>
#include <mutex>

#include "cohort/base/unique_fd.h"
#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class FileStore final : public Store {
 public:
  // Opens (creating if needed) the file at path. Throws IoError on failure.
  explicit FileStore(std::string path, Duration timeout = kDefaultStoreTimeout);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::set;
  using Store::wait;

  const std::string& path() const { return path_; }

 private:
  class FileLock;
  // Reads records appended since the last refresh into cache_. Needs the lock.
  void refresh_locked();
  // Appends one record (value == nullptr: delete). Needs the exclusive lock.
  void append_locked(const std::string& key, const Bytes* value);
  // True when all keys are present after a refresh under a shared lock.
  bool check_fresh(const std::vector<std::string>& keys, std::vector<std::string>* missing);

  std::string path_;
  UniqueFd fd_;
  std::mutex mu_;
  std::map<std::string, Bytes> cache_;
  uint64_t offset_ = 0;  // bytes of the file already parsed into cache_
};

}  // namespace cohort::rendezvous
