#include "cohort/nn/module.h"

#include "cohort/core/device_runtime.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <unordered_set>

#include "cohort/autograd/grad_mode.h"
#include "cohort/core/device_runtime.h"

namespace cohort::nn {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string list_str(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return "[" + out + "]";
}

}  // namespace

struct Module::CopyMemo {
  std::map<const TensorImpl*, Tensor> tensors;
};

std::string Module::describe() const { return type_name_ + "(" + extra_repr() + ")"; }

std::string Module::repr() const {
  std::string out;
  repr_into(out, 0);
  return out;
}

void Module::repr_into(std::string& out, int indent) const {
  if (children_.empty()) {
    out += describe();
    return;
  }
  out += type_name_ + "(";
  std::string extra = extra_repr();
  if (!extra.empty()) out += "\n" + std::string(indent + 2, ' ') + extra;
  for (const auto& [name, c] : children_) {
    out += "\n" + std::string(indent + 2, ' ') + "(" + name + "): ";
    c->repr_into(out, indent + 2);
  }
  out += "\n" + std::string(indent, ' ') + ")";
}

Tensor Module::forward(const Tensor& input) {
  throw NotSupported(describe() + ": has no one-input forward");
}

void Module::check_new_name(const std::string& name, const char* what) const {
  COHORT_CHECK(!name.empty() && name.find('.') == std::string::npos,
               "{}: {} name must be non-empty and contain no '.', got '{}'", describe(), what,
               name);
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& e) { return e.first == name; });
  };
  COHORT_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_),
               "{}: cannot register {} '{}': the name is already taken", describe(), what, name);
}

size_t Module::register_parameter(std::string name, Tensor t, bool requires_grad) {
  check_new_name(name, "parameter");
  COHORT_CHECK(t.defined() && is_floating(t.dtype()),
               "{}: parameter '{}' must be a defined floating tensor", describe(), name);
  COHORT_CHECK(t.is_leaf(), "{}: parameter '{}' must be a leaf tensor (detach it first)",
               describe(), name);
  t.set_requires_grad(requires_grad);
  params_.emplace_back(std::move(name), std::move(t));
  return params_.size() - 1;
}

size_t Module::register_buffer(std::string name, Tensor t) {
  check_new_name(name, "buffer");
  COHORT_CHECK(t.defined(), "{}: buffer '{}' must be a defined tensor", describe(), name);
  buffers_.emplace_back(std::move(name), std::move(t));
  return buffers_.size() - 1;
}

void Module::add_child(std::string name, ModulePtr module) {
  check_new_name(name, "child module");
  COHORT_CHECK(module != nullptr, "{}: child module '{}' is null", describe(), name);
  children_.emplace_back(std::move(name), std::move(module));
}

Module& Module::child_at(size_t slot) const {
  COHORT_CHECK(slot < children_.size(), "{}: no child in slot {} (it has {})", describe(), slot,
               children_.size());
  return *children_[slot].second;
}

namespace {

// "cohort::nn::Linear" for typeid(Linear).name().
std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

}  // namespace

void Module::wrong_child_type(size_t slot, const char* wanted) const {
  const Module& c = *children_[slot].second;
  throw InvalidArgument(fmt::format("{}: child {} '{}' is a {}, not the requested {}", describe(),
                                    slot, children_[slot].first, c.type_name(), demangle(wanted)));
}

void Module::collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out,
                     std::unordered_set<const TensorImpl*>* seen) const {
  for (const auto& [name, t] : params ? params_ : buffers_) {
    if (seen && !seen->insert(t.unsafe_impl()).second) continue;
    out.emplace_back(join(prefix, name), t);
  }
  if (!recurse) return;
  for (const auto& [name, c] : children_) c->collect(join(prefix, name), params, true, out, seen);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", true, recurse, out, &seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", false, recurse, out, &seen);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const { return children_; }

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (const auto& [name, c] : children_) out.push_back(c);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (auto& [name, c] : children_) c->collect_modules(join(prefix, name), out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, c] : children_) c->apply(fn);
  fn(*this);
  return *this;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& t : parameters()) n += t.numel();
  return n;
}

const Tensor& Module::parameter(std::string_view name) const {
  for (const auto& [n, t] : params_)
    if (n == name) return t;
  throw InvalidArgument(fmt::format("{}: no parameter named '{}'", describe(), name));
}

const Tensor& Module::buffer(std::string_view name) const {
  for (const auto& [n, t] : buffers_)
    if (n == name) return t;
  throw InvalidArgument(fmt::format("{}: no buffer named '{}'", describe(), name));
}

ModulePtr Module::child(std::string_view name) const {
  for (const auto& [n, c] : children_)
    if (n == name) return c;
  throw InvalidArgument(fmt::format("{}: no child module named '{}'", describe(), name));
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [name, c] : children_) c->train(on);
  return *this;
}

namespace {

// Points every handle of `t` at a copy of its data on `device`.
void move_in_place(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  Tensor moved = t.detach().to(device);
  TensorImpl* impl = t.unsafe_impl();
  impl->storage = moved.storage();
  impl->strides = moved.strides();
  impl->offset = moved.storage_offset();
  impl->bf16_twin.reset();
}

}  // namespace

Module& Module::to(Device device) {
  device = resolve_device(device);
  for (const Tensor& p : parameters()) {
    move_in_place(p, device);
    move_in_place(p.grad(), device);
  }
  for (const Tensor& b : buffers()) move_in_place(b, device);
  return *this;
}

Device Module::device() const {
  for (const Tensor& p : parameters()) return p.device();
  for (const Tensor& b : buffers()) return b.device();
  return kCPU;
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      p.mutable_grad().zero_();
  }
}

void Module::collect_state(const std::string& prefix,
                           std::vector<std::pair<std::string, const Tensor*>>& out) const {
  for (auto& [name, t] : params_) out.emplace_back(join(prefix, name), &t);
  for (auto& [name, t] : buffers_) out.emplace_back(join(prefix, name), &t);
  for (auto& [name, c] : children_) c->collect_state(join(prefix, name), out);
}

TensorDict Module::state_dict() const {
  std::vector<std::pair<std::string, const Tensor*>> entries;
  collect_state("", entries);
  TensorDict out;
  for (auto& [name, t] : entries) out.insert(name, t->detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const TensorDict& dict, bool strict) {
  std::vector<std::pair<std::string, const Tensor*>> entries;
  collect_state("", entries);
  LoadStateDictResult result;
  std::unordered_set<std::string> known;
  std::vector<std::pair<const Tensor*, const Tensor*>> copies;
  for (auto& [name, target] : entries) {
    known.insert(name);
    const Tensor* src = dict.find(name);
    if (src == nullptr) {
      result.missing_keys.push_back(name);
      continue;
    }
    COHORT_CHECK(src->sizes() == target->sizes(),
                 "load_state_dict: {}: size mismatch for {}: the state dict has {}, the model has "
                 "{}",
                 type_name_, name, shape_str(src->sizes()), shape_str(target->sizes()));
    copies.emplace_back(target, src);
  }
  for (const auto& [name, t] : dict)
    if (!known.count(name)) result.unexpected_keys.push_back(name);
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::string msg = fmt::format("load_state_dict: {}: ", type_name_);
    if (!result.missing_keys.empty()) msg += "missing keys " + list_str(result.missing_keys);
    if (!result.unexpected_keys.empty())
      msg += std::string(result.missing_keys.empty() ? "" : "; ") + "unexpected keys " +
             list_str(result.unexpected_keys);
    throw InvalidArgument(msg);
  }
  NoGradGuard no_grad;
  for (auto& [target, src] : copies) {
    Tensor t = *target;  // a handle on the same data: copy_ writes the module's tensor
    if (!src->is_same(t)) t.copy_(*src);
  }
  return result;
}

ModulePtr Module::copy_tree(bool deep, CopyMemo& memo) const {
  ModulePtr copy;
  std::vector<detail::ChildSlot*> typed_members;
  {
    detail::ChildSlotLog log;
    copy = copy_shell();
    typed_members = log.slots();
  }
  auto copy_tensor = [&](Tensor& t, bool is_param) {
    if (!deep && is_param) return;  // replicas share parameters
    auto it = memo.tensors.find(t.unsafe_impl());
    if (it != memo.tensors.end()) {
      t = it->second;
      return;
    }
    Tensor c = t.clone();
    if (t.requires_grad()) c.set_requires_grad(true);
    memo.tensors.emplace(t.unsafe_impl(), c);
    t = c;
  };
  copy->forward_hooks_.clear();
  for (auto& [name, t] : copy->params_) copy_tensor(t, true);
  for (auto& [name, t] : copy->buffers_) copy_tensor(t, false);
  for (auto& [name, c] : copy->children_) c = c->copy_tree(deep, memo);
  for (detail::ChildSlot* member : typed_members) {
    if (!member->module_) continue;
    size_t i = 0;
    while (i < children_.size() && children_[i].second != member->module_) ++i;
    COHORT_CHECK(i < children_.size(),
                 "{}: a Child member refers to a {} that is not a registered child of this "
                 "module, so its copy would still point at the original; register it with "
                 "register_module",
                 describe(), member->module_->type_name());
    member->module_ = copy->children_[i].second;
  }
  copy->on_copy(deep);
  return copy;
}

uint64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  COHORT_CHECK(static_cast<bool>(hook), "{}: register_forward_pre_hook: empty hook", describe());
  forward_hooks_.push_back({next_hook_id_, std::move(hook), {}});
  return next_hook_id_++;
}

uint64_t Module::register_forward_hook(ForwardHook hook) {
  COHORT_CHECK(static_cast<bool>(hook), "{}: register_forward_hook: empty hook", describe());
  forward_hooks_.push_back({next_hook_id_, {}, std::move(hook)});
  return next_hook_id_++;
}

void Module::remove_forward_hook(uint64_t id) {
  std::erase_if(forward_hooks_, [id](const ForwardHookEntry& e) { return e.id == id; });
}

void Module::run_forward_pre_hooks() {
  // A copy: a hook may remove itself.
  std::vector<ForwardHookEntry> hooks = forward_hooks_;
  for (const ForwardHookEntry& e : hooks)
    if (e.pre) e.pre(*this);
}

void Module::run_forward_hooks(Tensor& output) {
  std::vector<ForwardHookEntry> hooks = forward_hooks_;
  for (const ForwardHookEntry& e : hooks)
    if (e.post) e.post(*this, output);
}

ModulePtr Module::clone() const {
  CopyMemo memo;
  NoGradGuard no_grad;
  return copy_tree(true, memo);
}

ModulePtr Module::replicate() const {
  CopyMemo memo;
  NoGradGuard no_grad;
  return copy_tree(false, memo);
}

namespace detail {
namespace {
thread_local ChildSlotLog* t_child_slot_log = nullptr;
}  // namespace

ChildSlot::ChildSlot(const ChildSlot& other) : module_(other.module_) { ChildSlotLog::note(this); }

ChildSlot& ChildSlot::operator=(const ChildSlot& other) {
  module_ = other.module_;
  ChildSlotLog::note(this);
  return *this;
}

ChildSlot::~ChildSlot() { ChildSlotLog::forget(this); }

Module* ChildSlot::checked(const char* what) const {
  COHORT_CHECK(module_ != nullptr,
               "{}: this Child holds no module; assign it the result of register_module first",
               what);
  return module_.get();
}

ChildSlotLog::ChildSlotLog() : outer_(t_child_slot_log) { t_child_slot_log = this; }
ChildSlotLog::~ChildSlotLog() { t_child_slot_log = outer_; }

void ChildSlotLog::note(ChildSlot* slot) {
  if (!t_child_slot_log) return;
  auto& slots = t_child_slot_log->slots_;
  if (std::find(slots.begin(), slots.end(), slot) == slots.end()) slots.push_back(slot);
}

void ChildSlotLog::forget(ChildSlot* slot) {
  for (ChildSlotLog* log = t_child_slot_log; log != nullptr; log = log->outer_) {
    log->slots_.erase(std::remove(log->slots_.begin(), log->slots_.end(), slot), log->slots_.end());
  }
}

}  // namespace detail

}  // namespace cohort::nn
