// The backward engine: runs the graph behind `roots`. Nodes are executed
// when all gradients flowing into them have arrived (dependency counting),
// latest-created first among the ready ones; gradients reaching one node
// along several paths are summed before it runs. Leaves receive their
// gradient through AccumulateGrad, which fires the leaf's grad-ready hooks.
// Grad mode is off while backward runs.
//
// Threads: a plain graph runs on the calling thread alone, in that
// deterministic order (DDP's bucketing relies on it). A graph holding nodes
// made inside concurrent inter-op branches (Node::concurrent_branches() > 1,
// see cohort/parallel/inter_op) runs its ready nodes on N threads at once,
// N = min(largest concurrent_branches(), the caller's num_threads()), each
// with the caller's budget / N intra-op threads (so N x that <= the budget).
// Gradient sums and dependency counts are then kept under a lock, and leaves
// are applied one at a time, so grad-ready hooks never run concurrently
// (though possibly on an engine thread other than the caller). Results equal
// the single-threaded order's up to float rounding of sums.
// Failure: an exception from a node or a hook propagates out of
// run_backward (the first one; other engine threads stop after their current
// node); the graph is then partly consumed and must not be reused.
// Thread safety: independent graphs may run on different threads at once.
// Re-entrant: a node's backward may itself run the engine over another graph
// (activation checkpointing's recomputed forward, autograd/checkpoint.h); each
// run keeps its own state and holds no lock while a node runs.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::autograd {

class Node;

// grads[i] is the gradient of roots[i] (same shape); an undefined entry means
// ones (only allowed for one-element roots).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);

// torch.autograd.grad: the gradients of roots with respect to `inputs`
// (tensors that require grad, leaves or not), returned one per input
// (undefined where no gradient reached it) instead of accumulated: no leaf's
// .grad changes and no grad-ready hook fires. The graph behind roots is
// consumed as by run_backward up to the inputs; what lies behind an input is
// not run. roots/grads as in run_backward. Throws InvalidArgument for an
// input that does not require grad.
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs);
// The same with the inputs named by the nodes their gradient flows into
// (gradient_edge(t).node, node.h): for a non-leaf its grad_fn, for a leaf
// its AccumulateGrad. The gradient reaching targets[i] is returned in
// place of running it.
std::vector<Tensor> grad_at_nodes(const std::vector<Tensor>& roots,
                                  const std::vector<Tensor>& grads,
                                  const std::vector<std::shared_ptr<Node>>& targets);

// ---- Backward split in two (zero-bubble pipeline schedules) ----
// B runs each node on the path to the inputs with only the gradients that
// lead there, keeping the node's saved state when other edges remain; W later
// runs those nodes again for the remaining edges (then frees them) and
// everything behind. Nodes other than FunctionNode that cannot run in parts
// run whole in B, their other gradients kept for W.

// The W half of a split backward: the gradients that do not flow into the
// chosen inputs (parameter gradients), computed later and once.
class DeferredGradients {
 public:
  DeferredGradients();
  DeferredGradients(DeferredGradients&&) noexcept;
  DeferredGradients& operator=(DeferredGradients&&) noexcept;
  // Dropping it un-run frees the saved state (those gradients are lost).
  ~DeferredGradients();
  // Nothing left to run.
  bool empty() const;
  // W: accumulates into the leaves' .grad (their hooks fire); then empty().
  // Runs at most once: a second call (or a call on an empty or moved-from
  // object) does nothing. Failure: an exception from a node or hook
  // propagates and the deferred work is dropped (as with run_backward, the
  // graph is then partly consumed). Not thread-safe on one object.
  void run();

 private:
  struct State;
  std::unique_ptr<State> state_;
  friend DeferredGradients run_backward_split(const std::vector<Tensor>&,
                                              const std::vector<Tensor>&,
                                              const std::vector<Tensor>&);
};

// B: runs only the part of the graph behind `roots` that leads to `inputs`
// (tensors requiring grad, normally leaves such as a pipeline stage's
// received activation x.detach().set_requires_grad(true)); their .grad()
// receives the gradient exactly as backward() would give it. Everything else
// (parameter gradients) is returned for a later run(). roots/grads as in
// run_backward. With `inputs` empty (a first stage) B does nothing and W is
// the whole backward. B then W gives the same gradients as run_backward.
// The returned object holds the graph's remaining saved state until run() or
// destruction. Throws InvalidArgument for an input that is not a leaf
// requiring grad.
DeferredGradients run_backward_split(const std::vector<Tensor>& roots,
                                     const std::vector<Tensor>& grads,
                                     const std::vector<Tensor>& inputs);

// ---- End-of-backward callbacks ----

// From inside a backward (a node, a grad-ready hook): runs `fn` once the
// outermost backward running on this thread has run its whole graph, before
// it returns (PyTorch's Variable._execution_engine.queue_callback). A nested
// backward (run from a node) leaves its callbacks to the outer one, so they
// see every gradient of the pass. Callbacks run in the order queued, on the
// thread that called backward, with grad mode off; one may queue more. An
// exception from one propagates out of backward and the rest are dropped; a
// failed backward drops them all. Throws InvalidArgument outside a backward.
void queue_callback(std::function<void()> fn);
// Whether a backward is running on this thread (queue_callback would take).
bool in_backward();

}  // namespace cohort::autograd
