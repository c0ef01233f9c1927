// nn::ModuleDict, as torch.nn.ModuleDict: holds child modules under chosen
// names, in insertion order, so that their parameters read "<name>.weight"
// (GPT's transformer.wte.weight). It has no forward; the owner calls its
// children. Thread safety: see module.h; inserting must not race with anything.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/nn/module.h"

namespace cohort::nn {

class ModuleDict : public Cloneable<ModuleDict> {
 public:
  ModuleDict() : Cloneable("ModuleDict") {}
  explicit ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& modules);

  // Adds under `name` (non-empty, no '.', not taken: InvalidArgument otherwise).
  ModuleDict& insert(std::string name, ModulePtr module);
  size_t size() const { return num_children(); }
  bool contains(std::string_view name) const;
  // InvalidArgument naming the key when absent.
  ModulePtr operator[](std::string_view name) const { return child(name); }
  // The module under `name` as M; InvalidArgument when absent or another type.
  template <typename M>
  M& at(std::string_view name) const {
    ModulePtr m = child(name);
    auto* typed = dynamic_cast<M*>(m.get());
    COHORT_CHECK(typed != nullptr, "ModuleDict: module '{}' is a {}, not the type asked for", name,
                 m->type_name());
    return *typed;
  }
};

}  // namespace cohort::nn
