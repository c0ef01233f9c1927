// TensorDict: an ordered map from names to tensors -- the exchange type of
// state dicts (nn::Module::state_dict, optim::Optimizer::state_dict) and of
// checkpoint files. Insertion order is kept (it is PyTorch's state_dict order
// and the order tensors are written to a file); lookup by name is O(log n).
// Values are Tensor handles: inserting does not copy data.
// Thread safety: like a std::vector; concurrent reads are safe, writes are the
// caller's to synchronise.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort {

class TensorDict {
 public:
  using Item = std::pair<std::string, Tensor>;
  using const_iterator = std::vector<Item>::const_iterator;

  TensorDict() = default;

  // Appends name -> t; throws InvalidArgument when name is already present.
  void insert(std::string name, Tensor t);
  // Replaces the value of an existing name (keeping its position) or appends.
  void insert_or_assign(std::string name, Tensor t);
  // Removes name; returns whether it was present.
  bool erase(std::string_view name);

  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  // The tensor called name; throws InvalidArgument naming the key when absent.
  const Tensor& at(std::string_view name) const;
  // Pointer to the tensor called name, or nullptr.
  const Tensor* find(std::string_view name) const;

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  const Item& operator[](size_t i) const { return items_.at(i); }
  std::vector<std::string> keys() const;

  // The entries whose names start with prefix, with the prefix removed
  // (sub("model.") of {"model.fc.weight", "optim.lr"} is {"fc.weight"}).
  TensorDict sub(std::string_view prefix) const;
  // Appends every entry of other under prefix + name; throws on duplicates.
  void merge(const TensorDict& other, std::string_view prefix = "");

 private:
  std::vector<Item> items_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace cohort
