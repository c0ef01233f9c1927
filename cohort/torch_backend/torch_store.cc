#include "cohort/torch_backend/torch_store.h"

#include <fmt/format.h>

#include <string>

#include "cohort/base/error.h"

namespace cohort::torch_backend {
namespace {

std::string join(const std::vector<std::string>& keys) {
  std::string s;
  for (const std::string& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

// Runs a c10d store call; its failures become cohort's errors. c10d reports
// a wait that ran out as a c10::Error whose text says "Timeout" (FileStore,
// TCPStore), anything else (a server gone) as std::runtime_error or c10::Error.
template <typename F>
auto guarded(const char* call, const std::string& keys, F&& f) {
  try {
    return f();
  } catch (const cohort::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string msg =
        fmt::format("PyTorch store: {}({}) failed: {}", call, keys, what.substr(0, 2000));
    if (what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos)
      throw TimeoutError(msg);
    throw PeerLost(msg);
  }
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  COHORT_CHECK(store_, "TorchStore: the PyTorch store is null");
  timeout_ = store_->getTimeout();
}

void TorchStore::set(const std::string& key, const rendezvous::Bytes& value) {
  guarded("set", key, [&] {
    store_->set(key, value);
    return 0;
  });
}

rendezvous::Bytes TorchStore::get(const std::string& key) {
  // c10d's get waits with the c10d store's own timeout; cohort's callers
  // expect this store's, so wait first.
  wait({key}, timeout_);
  return guarded("get", key, [&] { return store_->get(key); });
}

int64_t TorchStore::add(const std::string& key, int64_t delta) {
  return guarded("add", key, [&] { return store_->add(key, delta); });
}

rendezvous::Bytes TorchStore::compare_set(const std::string& key, const rendezvous::Bytes& expected,
                                          const rendezvous::Bytes& desired) {
  return guarded("compare_set", key, [&] { return store_->compareSet(key, expected, desired); });
}

bool TorchStore::check(const std::vector<std::string>& keys) {
  return guarded("check", join(keys), [&] { return store_->check(keys); });
}

bool TorchStore::delete_key(const std::string& key) {
  return guarded("delete_key", key, [&] { return store_->deleteKey(key); });
}

void TorchStore::wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) {
  guarded("wait", join(keys), [&] {
    store_->wait(keys, timeout);
    return 0;
  });
}

}  // namespace cohort::torch_backend
