#include "cohort/nn/module_dict.h"

#include <algorithm>

namespace cohort::nn {

ModuleDict::ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& modules)
    : Cloneable("ModuleDict") {
  for (const auto& [name, m] : modules) insert(name, m);
}

ModuleDict& ModuleDict::insert(std::string name, ModulePtr module) {
  register_module(std::move(name), std::move(module));
  return *this;
}

bool ModuleDict::contains(std::string_view name) const {
  auto children = named_children();
  return std::any_of(children.begin(), children.end(),
                     [&](const auto& c) { return c.first == name; });
}

}  // namespace cohort::nn
