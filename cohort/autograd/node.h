// Graph nodes of the dynamic autograd graph. Each differentiable op that sees
// an input requiring grad creates one Node for its (single) output; the node
// owns what backward needs (saved tensors, detached so that no cycle forms)
// and an Edge to the producer of each input. Leaves that require grad are
// reached through their AccumulateGrad node, shared by all uses of the leaf.
// Ownership: a tensor owns its grad_fn; nodes own their next nodes, so a graph
// lives as long as its outputs. Backward frees each node's saved state after
// using it (no retain_graph), so a second backward through it throws.
// Thread safety: a graph is used by one thread at a time (the engine may run
// distinct nodes of one graph on several threads, never one node twice at
// once); distinct graphs may run concurrently. AccumulateGrad locks the leaf's record, so leaves
// may be shared between graphs on different threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::autograd {

class Node;

// Where the gradient of one input goes; node == nullptr: nowhere.
struct Edge {
  std::shared_ptr<Node> node;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  explicit Node(std::vector<Edge> next_edges);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Given the gradient of this node's output, returns one gradient per next
  // edge (an undefined Tensor for "none").
  virtual std::vector<Tensor> apply(const Tensor& grad) = 0;
  virtual std::string name() const = 0;

  // Part of the backward, for a split backward (engine.h's
  // run_backward_split): gradients are computed for the edges where mask[i]
  // is true (others may come back undefined); with release false the saved
  // state is kept so that a later call can compute the rest. Only nodes whose
  // can_apply_in_parts() is true accept release == false; the base runs
  // apply(grad) when release is true and throws NotSupported otherwise.
  virtual std::vector<Tensor> apply(const Tensor& grad, const std::vector<bool>& mask,
                                    bool release);
  // Whether apply(grad, mask, false) is supported. When it is not, a split
  // backward runs the node whole in its first half and keeps the gradients
  // the second half needs.
  virtual bool can_apply_in_parts() const { return false; }

  // How many branches were running concurrently (inter-op parallelism) on the
  // thread that created this node; 1 for ordinary code. The engine runs a
  // graph that holds nodes with more than one on several threads
  // (engine.h), and a plain graph on the caller's thread alone.
  int concurrent_branches() const { return concurrent_branches_; }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  // Creation order on this thread; the engine runs later nodes first, so
  // gradients become ready in roughly reverse forward order (what DDP's
  // bucketing assumes).
  uint64_t sequence_nr() const { return sequence_nr_; }

 protected:
  void set_sequence_nr(uint64_t s) { sequence_nr_ = s; }

 private:
  std::vector<Edge> next_edges_;
  uint64_t sequence_nr_;
  int concurrent_branches_;
};

// RAII, for inter-op parallelism (cohort/parallel/inter_op): marks the nodes
// that the calling thread creates in this scope as made by one of `branches`
// concurrent branches (nested scopes multiply), and starts this thread's
// sequence numbers at `sequence_start` (the forking thread's
// next_sequence_nr()) so that the branch's nodes order after the nodes made
// before the fork. Thread-local, like grad mode; restores both on exit.
class ConcurrentBranchScope {
 public:
  ConcurrentBranchScope(int branches, uint64_t sequence_start);
  ~ConcurrentBranchScope();
  ConcurrentBranchScope(const ConcurrentBranchScope&) = delete;
  ConcurrentBranchScope& operator=(const ConcurrentBranchScope&) = delete;

 private:
  int saved_branches_;
  uint64_t saved_sequence_;
};

// The sequence number the calling thread's next node will get.
uint64_t next_sequence_nr();
// Moves it up to at least `at_least` (after joining branches that ran on
// other threads, so that the join's nodes order after theirs).
void advance_next_sequence_nr(uint64_t at_least);
// The calling thread's concurrent_branches() for new nodes (1 outside any
// ConcurrentBranchScope).
int current_concurrent_branches();

// The backward of an op, as a closure: fn(grad, needs_input_grad) returns one
// gradient per input (undefined where not needed).
using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& grad, const std::vector<bool>& needs)>;

class FunctionNode final : public Node {
 public:
  // `saved`: the tensors fn reads in backward; if one of them is modified in
  // place before backward runs (its storage version moves), apply throws
  // instead of computing a wrong gradient.
  FunctionNode(std::string name, std::vector<Edge> next_edges, BackwardFn fn,
               const std::vector<Tensor>& saved = {});
  std::vector<Tensor> apply(const Tensor& grad) override;
  // The closure is called with needs & mask; with release false it is kept
  // (and the saved tensors with it) for a call with the other edges.
  std::vector<Tensor> apply(const Tensor& grad, const std::vector<bool>& mask,
                            bool release) override;
  bool can_apply_in_parts() const override { return true; }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  BackwardFn fn_;
  std::vector<bool> needs_;
  std::vector<std::pair<std::shared_ptr<Storage>, uint64_t>> saved_versions_;
};

// Accumulates into a leaf's grad (in place when the leaf already has one,
// e.g. a view into a DDP bucket), then fires the leaf's grad-ready hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  std::vector<Tensor> apply(const Tensor& grad) override;
  std::string name() const override { return "AccumulateGrad"; }
  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;
};

// The edge through which gradient flows into `t`: its grad_fn, its
// AccumulateGrad (created on first use) when a leaf requiring grad, else none.
Edge gradient_edge(const Tensor& t);

// True when grad mode is on and any defined input requires grad.
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Makes `out` the output of a new FunctionNode over `inputs` when grad mode is
// on and some input requires grad; otherwise does nothing. Returns out.
// The closure must capture only detached tensors (Tensor::detach()); those
// that callers could modify in place (inputs, the output) are listed in
// `saved` so that such a modification is reported at backward.
Tensor& record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn,
               const std::vector<Tensor>& saved = {});

}  // namespace cohort::autograd
