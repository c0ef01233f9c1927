// Store: the key-value rendezvous every process group bootstraps through
// (PyTorch's c10d::Store). Keys are strings, values bytes. Implementations:
// TcpStore (one process serves, all connect), FileStore (a shared file),
// HashStore (in memory, for threads and tests), PrefixStore (a namespace
// inside another store, for subgroups).
//
// Thread safety: every implementation may be used from many threads at once.
// Every blocking call takes a timeout and throws cohort::TimeoutError naming
// the keys still missing when it passes; a lost server throws cohort::PeerLost.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::rendezvous {

using Bytes = std::vector<uint8_t>;
using Duration = std::chrono::milliseconds;

inline constexpr Duration kDefaultStoreTimeout = std::chrono::seconds(300);

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until the key exists (or the store's timeout passes), then returns it.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (0 when missing) and
  // returns the new value. The barrier primitive.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets key to desired when its current value equals expected (a missing key
  // matches an empty expected); returns the value after the call.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // True when every key exists; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes the key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  // Blocks until every key exists or timeout passes (TimeoutError names the missing ones).
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;

  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  Duration timeout() const { return timeout_; }
  void set_timeout(Duration t) { timeout_ = t; }

  // Conveniences for string values.
  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  Duration timeout_ = kDefaultStoreTimeout;
};

}  // namespace cohort::rendezvous
