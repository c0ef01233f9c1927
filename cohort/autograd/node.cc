#include "cohort/autograd/node.h"

#include <algorithm>
#include <limits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node_creation.h"
#include "cohort/core/autograd_meta.h"
#include "cohort/core/view_autograd.h"

namespace cohort::autograd {
namespace {
thread_local uint64_t t_next_sequence_nr = 0;
thread_local int t_concurrent_branches = 1;
thread_local NodeCreationScope* t_creation_scope = nullptr;
}  // namespace

NodeCreationScope::NodeCreationScope() : outer_(t_creation_scope) { t_creation_scope = this; }

NodeCreationScope::~NodeCreationScope() { t_creation_scope = outer_; }

void NodeCreationScope::note(const Node* n) {
  for (NodeCreationScope* s = t_creation_scope; s != nullptr; s = s->outer_) s->created_.insert(n);
}

Node::Node(std::vector<Edge> next_edges)
    : next_edges_(std::move(next_edges)),
      sequence_nr_(t_next_sequence_nr++),
      concurrent_branches_(t_concurrent_branches) {
  if (t_creation_scope != nullptr) NodeCreationScope::note(this);
}

std::vector<Tensor> Node::apply(const Tensor& grad, const std::vector<bool>& mask, bool release) {
  (void)mask;  // the caller ignores gradients outside the mask
  if (!release) {
    throw NotSupported(
        fmt::format("backward: {} cannot run its backward in two parts (split backward)", name()));
  }
  return apply(grad);
}

ConcurrentBranchScope::ConcurrentBranchScope(int branches, uint64_t sequence_start)
    : saved_branches_(t_concurrent_branches), saved_sequence_(t_next_sequence_nr) {
  t_concurrent_branches = saved_branches_ * std::max(branches, 1);
  t_next_sequence_nr = sequence_start;
}

ConcurrentBranchScope::~ConcurrentBranchScope() {
  t_concurrent_branches = saved_branches_;
  t_next_sequence_nr = std::max(saved_sequence_, t_next_sequence_nr);
}

uint64_t next_sequence_nr() { return t_next_sequence_nr; }

void advance_next_sequence_nr(uint64_t at_least) {
  t_next_sequence_nr = std::max(t_next_sequence_nr, at_least);
}

int current_concurrent_branches() { return t_concurrent_branches; }

FunctionNode::FunctionNode(std::string name, std::vector<Edge> next_edges, BackwardFn fn,
                           const std::vector<Tensor>& saved)
    : Node(std::move(next_edges)), name_(std::move(name)), fn_(std::move(fn)) {
  for (const Edge& e : this->next_edges()) needs_.push_back(e.valid());
  for (const Tensor& t : saved)
    if (t.defined()) saved_versions_.emplace_back(t.storage(), t.storage()->version());
}

std::vector<Tensor> FunctionNode::apply(const Tensor& grad) { return apply(grad, needs_, true); }

std::vector<Tensor> FunctionNode::apply(const Tensor& grad, const std::vector<bool>& mask,
                                        bool release) {
  if (!fn_) {
    throw Error(
        fmt::format("backward: the graph through {} was already freed by an earlier "
                    "backward (cohort keeps no retain_graph)",
                    name_));
  }
  for (const auto& [storage, version] : saved_versions_) {
    if (storage->version() != version) {
      throw Error(fmt::format(
          "backward: a tensor that {} saved for its gradient was modified in place after the "
          "forward pass (storage version {}, saved at {}); update it under NoGradGuard only "
          "after backward, or clone() it before modifying",
          name_, storage->version(), version));
    }
  }
  COHORT_ASSERT(mask.size() == needs_.size(), "{}: mask of {} for {} inputs", name_, mask.size(),
                needs_.size());
  std::vector<bool> needs(needs_.size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs_[i] && mask[i];
  std::vector<Tensor> out = fn_(grad, needs);
  if (release) fn_ = nullptr;  // frees the saved tensors
  COHORT_ASSERT(out.size() == needs_.size(), "{}: backward returned {} grads for {} inputs", name_,
                out.size(), needs_.size());
  return out;
}

AccumulateGrad::AccumulateGrad(Tensor variable) : Node({}), variable_(std::move(variable)) {
  // Leaves run as soon as they are ready so their hooks fire early.
  set_sequence_nr(std::numeric_limits<uint64_t>::max());
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad) {
  AutogradMeta& m = variable_.autograd_meta();
  std::vector<std::function<void(Tensor&)>> hooks;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    COHORT_CHECK(grad.sizes() == variable_.sizes(),
                 "backward: gradient of shape {} for a leaf of shape {}", shape_str(grad.sizes()),
                 shape_str(variable_.sizes()));
    if (m.grad.defined()) {
      m.grad.add_(grad);
    } else {
      // A fresh copy: the incoming tensor may alias another gradient.
      m.grad = grad.to(variable_.dtype()).clone();
    }
    for (auto& h : m.hooks) hooks.push_back(h.second);
  }
  for (auto& h : hooks) h(variable_);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.has_autograd_meta()) return {};
  AutogradMeta& m = t.autograd_meta();
  if (m.grad_fn) return {m.grad_fn};
  if (!m.requires_grad) return {};
  std::lock_guard<std::mutex> lock(m.mu);
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m.grad_accumulator = acc;
  }
  return {acc};
}

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor& record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn,
               const std::vector<Tensor>& saved) {
  if (!any_requires_grad(inputs)) return out;
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(gradient_edge(t));
  COHORT_ASSERT(!out.has_autograd_meta() || !out.autograd_meta().grad_fn,
                "{}: output already has a grad_fn", name);
  out.autograd_meta().grad_fn =
      std::make_shared<FunctionNode>(name, std::move(edges), std::move(fn), saved);
  return out;
}

namespace {

// Tensor's view members compute their backward formula in core, which does
// not depend on autograd (core/view_autograd.h); this turns it into a node.
void record_view_node(Tensor& out, const Tensor& base, const char* name,
                      cohort::detail::ViewBackward backward) {
  record(out, name, {base}, [fn = std::move(backward)](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{fn(g)};
  });
}

// Installed at start-up of every program that records a node or runs
// backward (the engine calls Node's members, so it links this file too);
// static libraries link only the object files a program uses.
[[maybe_unused]] const bool kViewRecorderInstalled =
    (cohort::detail::set_view_recorder(&record_view_node), true);

}  // namespace

}  // namespace cohort::autograd
