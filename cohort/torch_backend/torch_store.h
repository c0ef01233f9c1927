// TorchStore: cohort's rendezvous::Store over PyTorch's c10d::Store (the
// FileStore, TCPStore or PrefixStore that torch.distributed hands a backend
// plugin's factory), so that cohort's native bootstrap runs over PyTorch's
// rendezvous instead of one of its own. Part of the optional PyTorch backend
// (cohort/torch_backend/, docs/pytorch_backend.md).
//
// Ownership: shares the c10d store. Thread safety: as the c10d store's (all
// of PyTorch's are safe to call from several threads). Failures: c10d's
// errors (a timeout, a lost TCPStore server) are rethrown as cohort's
// TimeoutError or PeerLost naming the call and the keys.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "cohort/rendezvous/store.h"

namespace cohort::torch_backend {

class TorchStore final : public rendezvous::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store);

  void set(const std::string& key, const rendezvous::Bytes& value) override;
  rendezvous::Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  rendezvous::Bytes compare_set(const std::string& key, const rendezvous::Bytes& expected,
                                const rendezvous::Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) override;
  using Store::set;
  using Store::wait;

  const c10::intrusive_ptr<c10d::Store>& torch_store() const { return store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace cohort::torch_backend
