// PrefixStore: a namespace inside another store, so subgroups (and restarts
// of a job) can reuse key names without colliding. Every key is stored in the
// base store as "<prefix>/<key>".
//
// Ownership: shares ownership of the base store. Thread safety: as safe as
// the base store (all cohort stores are thread safe). Blocking calls use this
// store's timeout (copied from the base at construction; set_timeout changes
// it for this view only).
#pragma once

#include <memory>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::set;
  using Store::wait;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace cohort::rendezvous
