#include "cohort/nn/sequential.h"

namespace cohort::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Cloneable("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<ModulePtr>& modules) : Cloneable("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(ModulePtr module) {
  register_module(std::to_string(num_children()), std::move(module));
  return *this;
}

Sequential& Sequential::add(std::string name, ModulePtr module) {
  register_module(std::move(name), std::move(module));
  return *this;
}

ModulePtr Sequential::operator[](size_t i) const {
  COHORT_CHECK(i < num_children(), "Sequential: index {} out of range for {} modules", i,
               num_children());
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < num_children(); ++i) y = detail::call_forward(child<Module>(i), y);
  return y;
}

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) : Cloneable("ModuleList") {
  for (const auto& m : modules) push_back(m);
}

ModuleList& ModuleList::push_back(ModulePtr module) {
  register_module(std::to_string(num_children()), std::move(module));
  return *this;
}

ModulePtr ModuleList::operator[](size_t i) const {
  COHORT_CHECK(i < num_children(), "ModuleList: index {} out of range for {} modules", i,
               num_children());
  return named_children()[i].second;
}

}  // namespace cohort::nn
