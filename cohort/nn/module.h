// nn::Module: the base of layers and models, as torch.nn.Module. A module owns
// named parameters (leaf tensors that require grad), buffers (state that is
// saved but not trained, e.g. BatchNorm's running statistics) and child
// modules, each registered by name in the order the constructor registers
// them. Names are what PyTorch would produce: named_parameters() and
// state_dict() join the path with dots ("conv1.weight", "net.0.bias").
//
// Writing a module: derive from Cloneable<YourModule> and register
// everything in the constructor. Keep each child layer in a typed member,
// as in LibTorch (child.h):
//   fc1_ = register_module("fc1", std::make_shared<Linear>(784, 64, gen));
//   ... fc1_(x), fc1_->weight()                // nn::Child<Linear> fc1_;
// and reach parameters and buffers by the slot register_parameter() and
// register_buffer() return: param(slot), buf(slot). clone() and replicate()
// copy the registry and the plain members of your class (with its copy
// constructor) and re-point the Child members at the copied children; keep
// no other Tensor handles or module pointers as members, since those would
// still point at the original. Override on_copy() for other shared state.
//
// Randomness: constructors that initialise weights take a Generator& and draw
// from it in registration order (there is no global RNG, docs/design.md).
//
// Copies: clone() is a deep copy (new storage for every parameter and buffer,
// same names, requires_grad kept, no gradients); replicate() makes a new
// module tree whose parameters ARE the original's tensors (same data, same
// .grad, so gradients of all replicas accumulate into one place) while
// buffers are copied -- what a thread-based DataParallel needs for replicas
// 1..n-1 (replica 0 is the original, so BatchNorm statistics it computes are
// kept, as in PyTorch).
//
// Thread safety: forward on one module from several threads is safe when the
// module holds no per-call state (Linear, Conv2d, activations); BatchNorm in
// training mode updates its buffers and must not be shared between threads:
// give each thread a replica. Registration, train()/eval() and
// load_state_dict() must not race with anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cohort/autograd/ops.h"
#include "cohort/core/tensor.h"
#include "cohort/core/tensor_dict.h"
#include "cohort/nn/child.h"

namespace cohort::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What a non-strict load_state_dict skipped.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module
};

class Module {
 public:
  virtual ~Module() = default;
  Module& operator=(const Module&) = delete;

  // "Linear", "Net", ...
  const std::string& type_name() const { return type_name_; }
  // The constructor arguments as PyTorch prints them ("in_features=10, ...").
  virtual std::string extra_repr() const { return ""; }
  // type_name(extra_repr()): the prefix of this module's error messages.
  std::string describe() const;
  // A PyTorch-style multi-line tree of this module and its children.
  std::string repr() const;

  // One-input forward. The base throws NotSupported (ModuleList and losses
  // have no one-input forward, like PyTorch's).
  virtual Tensor forward(const Tensor& input);
  // forward between the forward hooks (see below).
  Tensor operator()(const Tensor& input);

  // ---- parameters, buffers, children (pre-order: own entries first, then
  // each child's subtree in registration order; a tensor registered twice is
  // listed once) ----
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  std::vector<ModulePtr> children() const;
  // Every module of the tree with its dotted path; the root is "" (non-owning).
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Calls fn on every module of the tree, children first and this module
  // last (torch.nn.Module.apply), e.g. for a custom initialisation.
  Module& apply(const std::function<void(Module&)>& fn);
  // Total number of parameter elements.
  int64_t num_parameters() const;

  // Own entries by name; throw InvalidArgument naming the module and the key.
  const Tensor& parameter(std::string_view name) const;
  const Tensor& buffer(std::string_view name) const;
  ModulePtr child(std::string_view name) const;

  // ---- modes ----
  // Sets training mode on this module and all descendants.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // ---- device (torch.nn.Module.to / .cuda() / .cpu()) ----
  // Moves every parameter and buffer to `device` in place: each tensor handle
  // (the module's, an optimizer's built before) now sees the moved data, as
  // PyTorch's param.data = ...; gradients are moved too. Build optimizers
  // and DDP after moving, as in PyTorch.
  Module& to(Device device);
  Module& cuda() { return to(Device(DeviceType::kCUDA)); }
  Module& cpu() { return to(kCPU); }
  // The device of the first parameter (or buffer); cpu when there is none.
  Device device() const;

  // Clears the gradients of all parameters: zeroes them in place by default
  // (PyTorch 1.13's default; keeps gradient tensors that DDP points into its
  // buckets), or drops them when set_to_none.
  void zero_grad(bool set_to_none = false);

  // ---- forward hooks (torch.nn.Module.register_forward_pre_hook and
  // register_forward_hook) ----
  // Run by the call operators -- module(x), a Child's fc1_(x), Cloneable's
  // gpt(idx, targets) and Sequential's loop -- not by a direct forward()
  // call: pre hooks before forward, post hooks after it with the output,
  // which they may replace (to attach a backward hook to it). Forwards that
  // return something other than a Tensor run no hooks. What strategies
  // acting around a submodule's forward use (ZeRO stage 3 gathers the
  // submodule's parameters before it and frees them after). Hooks are not
  // copied by clone()/replicate(). A hook's exception propagates out of the
  // call. Registration must not race with a forward.
  using ForwardPreHook = std::function<void(Module&)>;
  using ForwardHook = std::function<void(Module&, Tensor& output)>;
  // Return an id for remove_forward_hook.
  uint64_t register_forward_pre_hook(ForwardPreHook hook);
  uint64_t register_forward_hook(ForwardHook hook);
  // Removes the hook with that id (either kind); unknown ids are ignored.
  void remove_forward_hook(uint64_t id);
  bool has_forward_hooks() const { return !forward_hooks_.empty(); }
  void run_forward_pre_hooks();
  void run_forward_hooks(Tensor& output);

  // ---- state ----
  // Per module in pre-order: its parameters, then its buffers, names dotted.
  // Values share storage with the module's tensors (detached): clone them to
  // keep a snapshot across training steps.
  TensorDict state_dict() const;
  // Copies the dict's values into the module's tensors (converting dtype).
  // A shape mismatch is always an error naming the tensor and both shapes;
  // with strict, so are missing and unexpected keys. Everything is checked
  // before anything is copied, so a failed load leaves the module unchanged.
  LoadStateDictResult load_state_dict(const TensorDict& dict, bool strict = true);

  // ---- copies (see the header comment) ----
  ModulePtr clone() const;
  ModulePtr replicate() const;
  template <typename M>
  std::shared_ptr<M> clone_as() const {
    return std::static_pointer_cast<M>(clone());
  }

 protected:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  Module(const Module&) = default;  // shallow: used by clone()/replicate()

  // Register an entry; names must be non-empty, without '.', unique within
  // this module. Parameters must be defined floating leaf tensors; they are
  // set to require grad unless requires_grad is false (a frozen parameter,
  // still listed and saved). Return the slot for param()/buf(), and for a
  // child a Child of the registered pointer's type.
  size_t register_parameter(std::string name, Tensor t, bool requires_grad = true);
  size_t register_buffer(std::string name, Tensor t);
  template <typename M>
  Child<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    add_child(std::move(name), module);
    return Child<M>(std::move(module));
  }

  Tensor& param(size_t slot) { return params_[slot].second; }
  const Tensor& param(size_t slot) const { return params_[slot].second; }
  Tensor& buf(size_t slot) { return buffers_[slot].second; }
  const Tensor& buf(size_t slot) const { return buffers_[slot].second; }
  // The child in `slot` (registration order), checked to be an M:
  // InvalidArgument naming both types otherwise.
  template <typename M>
  M& child(size_t slot) const {
    Module& c = child_at(slot);
    if (auto* m = dynamic_cast<M*>(&c)) return *m;
    wrong_child_type(slot, typeid(M).name());
  }
  size_t num_children() const { return children_.size(); }

  // A shallow copy of the most-derived object (Cloneable implements it).
  virtual ModulePtr copy_shell() const = 0;
  // Called on the copy after its registry has been re-pointed; deep tells
  // clone() from replicate().
  virtual void on_copy(bool deep) {}

 private:
  struct CopyMemo;
  ModulePtr copy_tree(bool deep, CopyMemo& memo) const;
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(std::string name, ModulePtr module);
  Module& child_at(size_t slot) const;
  [[noreturn]] void wrong_child_type(size_t slot, const char* wanted) const;
  void collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out,
               std::unordered_set<const TensorImpl*>* seen) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out);
  void collect_state(const std::string& prefix,
                     std::vector<std::pair<std::string, const Tensor*>>& out) const;
  void repr_into(std::string& out, int indent) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  struct ForwardHookEntry {
    uint64_t id = 0;
    ForwardPreHook pre;  // set for a pre hook
    ForwardHook post;    // set for a post hook
  };
  std::vector<ForwardHookEntry> forward_hooks_;
  uint64_t next_hook_id_ = 1;
};

namespace detail {
// m.forward(args...) between m's forward hooks (Tensor results only).
template <typename M, typename... Args>
decltype(auto) call_forward(M& m, Args&&... args) {
  using R = decltype(m.forward(std::forward<Args>(args)...));
  if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
    if (m.has_forward_hooks()) {
      m.run_forward_pre_hooks();
      Tensor out = m.forward(std::forward<Args>(args)...);
      m.run_forward_hooks(out);
      return R(out);
    }
  }
  return m.forward(std::forward<Args>(args)...);
}
}  // namespace detail

inline Tensor Module::operator()(const Tensor& input) { return detail::call_forward(*this, input); }

// CRTP base giving a module its copy_shell(): derive `class Foo : public
// Cloneable<Foo>` and call Cloneable<Foo>("Foo") from the constructor.
// Its call operator forwards any arguments to Foo::forward, so a module with
// several forward overloads is called as LibTorch users write it:
// `gpt(idx)`, `gpt(idx, targets)` (the overload is chosen at compile time).
template <typename Derived>
class Cloneable : public Module {
 public:
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    return detail::call_forward(static_cast<Derived&>(*this), std::forward<Args>(args)...);
  }

 protected:
  using Module::Module;
  ModulePtr copy_shell() const override {
    return std::make_shared<Derived>(static_cast<const Derived&>(*this));
  }
};

}  // namespace cohort::nn
