#include "cohort/rendezvous/prefix_store.h"

#include "cohort/base/error.h"

namespace cohort::rendezvous {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  COHORT_CHECK(base_ != nullptr, "PrefixStore '{}': base store must not be null", prefix_);
  timeout_ = base_->timeout();
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(full(key), value); }

Bytes PrefixStore::get(const std::string& key) {
  // Waits with this view's timeout, which may differ from the base's.
  std::string k = full(key);
  base_->wait({k}, timeout_);
  return base_->get(k);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(full(key), delta);
}

Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return base_->compare_set(full(key), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full(key)); }

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  base_->wait(full(keys), timeout);
}

}  // namespace cohort::rendezvous
