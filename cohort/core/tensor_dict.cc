#include "cohort/core/tensor_dict.h"

namespace cohort {

void TensorDict::insert(std::string name, Tensor t) {
  COHORT_CHECK(!contains(name), "TensorDict::insert: duplicate name '{}'", name);
  index_.emplace(name, items_.size());
  items_.emplace_back(std::move(name), std::move(t));
}

void TensorDict::insert_or_assign(std::string name, Tensor t) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    items_[it->second].second = std::move(t);
    return;
  }
  insert(std::move(name), std::move(t));
}

bool TensorDict::erase(std::string_view name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  size_t pos = it->second;
  index_.erase(it);
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
  for (auto& [key, i] : index_)
    if (i > pos) --i;
  return true;
}

const Tensor& TensorDict::at(std::string_view name) const {
  const Tensor* t = find(name);
  COHORT_CHECK(t != nullptr, "TensorDict: no tensor named '{}' (of {} entries)", name,
               items_.size());
  return *t;
}

const Tensor* TensorDict::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

std::vector<std::string> TensorDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [name, t] : items_) out.push_back(name);
  return out;
}

TensorDict TensorDict::sub(std::string_view prefix) const {
  TensorDict out;
  for (const auto& [name, t] : items_)
    if (name.starts_with(prefix)) out.insert(name.substr(prefix.size()), t);
  return out;
}

void TensorDict::merge(const TensorDict& other, std::string_view prefix) {
  for (const auto& [name, t] : other) insert(std::string(prefix) + name, t);
}

}  // namespace cohort
