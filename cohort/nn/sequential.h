// nn::Sequential and nn::ModuleList, as in PyTorch. Children are named "0",
// "1", ... in order (or by the names given to Sequential::add), so parameter
// names read "0.weight", "net.2.bias". Sequential::forward feeds each child's
// output to the next; ModuleList only holds modules (no forward).
// Thread safety: see module.h; appending must not race with anything.
#pragma once

#include <initializer_list>
#include <vector>

#include "cohort/nn/module.h"

namespace cohort::nn {

class Sequential : public Cloneable<Sequential> {
 public:
  Sequential() : Cloneable("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  explicit Sequential(const std::vector<ModulePtr>& modules);

  // Appends under the next index name; returns *this for chaining.
  Sequential& push_back(ModulePtr module);
  // Appends under a chosen name (PyTorch's OrderedDict form).
  Sequential& add(std::string name, ModulePtr module);

  Tensor forward(const Tensor& x) override;

  size_t size() const { return num_children(); }
  ModulePtr operator[](size_t i) const;
  // The i-th module as M; throws InvalidArgument when it is another type.
  template <typename M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>((*this)[i].get());
    COHORT_CHECK(m != nullptr, "Sequential: module {} is a {}, not the type asked for", i,
                 (*this)[i]->type_name());
    return *m;
  }
};

class ModuleList : public Cloneable<ModuleList> {
 public:
  ModuleList() : Cloneable("ModuleList") {}
  ModuleList(std::initializer_list<ModulePtr> modules);

  ModuleList& push_back(ModulePtr module);
  size_t size() const { return num_children(); }
  ModulePtr operator[](size_t i) const;
  template <typename M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>((*this)[i].get());
    COHORT_CHECK(m != nullptr, "ModuleList: module {} is a {}, not the type asked for", i,
                 (*this)[i]->type_name());
    return *m;
  }
};

}  // namespace cohort::nn
