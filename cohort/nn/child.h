// nn::Child<M>: a module's typed member for one of its registered child
// layers, as LibTorch's module holders (`torch::nn::Linear fc1{nullptr}`):
//
//   class MyNet : public nn::Cloneable<MyNet> {
//    public:
//     explicit MyNet(Generator& gen) : Cloneable("MyNet") {
//       fc1_ = register_module("fc1", std::make_shared<nn::Linear>(784, 64, gen));
//       fc2_ = register_module("fc2", std::make_shared<nn::Linear>(64, 10, gen));
//     }
//     Tensor forward(const Tensor& x) override { return fc2_(relu(fc1_(x))); }
//    private:
//     nn::Child<nn::Linear> fc1_, fc2_;
//   };
//
// The type is checked once, when register_module returns the Child (it is
// the registered pointer's own type), so no access casts by slot number.
// clone() and replicate() re-point the copy's Child members at the copy's
// children: Module's copy records every Child that the derived class's copy
// constructor copies or assigns (and that is still alive when it returns)
// and, once the children are copied, sets each one to the copy of the child
// it referred to. A Child that refers to no registered
// child of its module makes clone()/replicate() throw (it would keep pointing
// into the original).
// Thread safety: like a shared_ptr.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/core/tensor.h"

namespace cohort::nn {

class Module;

namespace detail {

// m.forward(args...) between m's forward hooks (defined in module.h).
template <typename M, typename... Args>
decltype(auto) call_forward(M& m, Args&&... args);

// The untyped part of Child<M>.
class ChildSlot {
 public:
  ChildSlot() = default;
  ChildSlot(std::nullptr_t) {}  // NOLINT: like LibTorch's `fc1{nullptr}`
  // Copies and assignments made while a Module copy is being made on this
  // thread are recorded, so that a user-written copy constructor which
  // assigns its members in its body is re-pointed too.
  ChildSlot(const ChildSlot& other);
  ChildSlot& operator=(const ChildSlot& other);
  ~ChildSlot();

  explicit operator bool() const { return module_ != nullptr; }

 protected:
  explicit ChildSlot(std::shared_ptr<Module> module) : module_(std::move(module)) {}
  // Throws InvalidArgument when unset (a Child used before register_module).
  Module* checked(const char* what) const;

  std::shared_ptr<Module> module_;

 private:
  friend class cohort::nn::Module;
};

// While alive, collects the ChildSlots copy-constructed on this thread (the
// members of the module that Module::copy_tree is copying). Not nestable
// across threads; nested scopes restore the outer one.
class ChildSlotLog {
 public:
  ChildSlotLog();
  ~ChildSlotLog();
  ChildSlotLog(const ChildSlotLog&) = delete;
  ChildSlotLog& operator=(const ChildSlotLog&) = delete;

  const std::vector<ChildSlot*>& slots() const { return slots_; }
  static void note(ChildSlot* slot);
  // A slot destroyed while the log is alive (a temporary) is dropped from it.
  static void forget(ChildSlot* slot);

 private:
  std::vector<ChildSlot*> slots_;
  ChildSlotLog* outer_;
};

}  // namespace detail

template <typename M>
class Child : public detail::ChildSlot {
 public:
  Child() = default;
  Child(std::nullptr_t) {}  // NOLINT

  M* get() const { return static_cast<M*>(checked("Child::get")); }
  M* operator->() const { return get(); }
  M& operator*() const { return *get(); }
  std::shared_ptr<M> ptr() const { return std::static_pointer_cast<M>(module_); }
  // Forward through the child with any arguments its forward overloads take,
  // as `fc1(x)` or `gpt(idx, targets)` in LibTorch (running its forward hooks).
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    return detail::call_forward(*get(), std::forward<Args>(args)...);
  }

 private:
  friend class Module;
  explicit Child(std::shared_ptr<M> module) : ChildSlot(std::move(module)) {}
};

}  // namespace cohort::nn
