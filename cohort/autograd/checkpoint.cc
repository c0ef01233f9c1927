#include "cohort/autograd/checkpoint.h"

#include <unordered_map>
#include <unordered_set>

#include "cohort/autograd/engine.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/node_creation.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/autograd_meta.h"
#include "cohort/core/random.h"

namespace cohort::autograd {
namespace {

// Edges 0 .. inputs-1 lead to the inputs (invalid where one needs no grad);
// the rest to the outside tensors fn used (found at the first run).
class CheckpointNode final : public Node {
 public:
  CheckpointNode(std::vector<Edge> edges, CheckpointFn fn, std::vector<Tensor> inputs,
                 std::vector<bool> input_requires_grad, std::vector<GeneratorSnapshot> rng,
                 PrecisionPolicy precision, Shape out_sizes)
      : Node(std::move(edges)),
        fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        input_requires_grad_(std::move(input_requires_grad)),
        rng_(std::move(rng)),
        precision_(precision),
        out_sizes_(std::move(out_sizes)) {
    for (const Tensor& t : inputs_) versions_.push_back(t.defined() ? t.storage()->version() : 0);
  }

  std::string name() const override { return "CheckpointBackward"; }

  std::vector<Tensor> apply(const Tensor& grad) override {
    COHORT_CHECK(fn_ != nullptr,
                 "backward: the graph through {} was already freed by an earlier backward "
                 "(cohort keeps no retain_graph)",
                 name());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Tensor& t = inputs_[i];
      if (t.defined() && t.storage()->version() != versions_[i]) {
        throw Error(fmt::format(
            "backward: input {} of a checkpointed region was modified in place after the "
            "forward pass (storage version {}, saved at {}); the recomputation would see other "
            "values. clone() it before modifying",
            i, t.storage()->version(), versions_[i]));
      }
    }
    std::vector<Tensor> in(inputs_.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (!inputs_[i].defined()) continue;
      in[i] = inputs_[i].detach();
      if (input_requires_grad_[i]) in[i].set_requires_grad(true);
    }
    Tensor out;
    {
      EnableGradGuard grad_on;  // the engine runs nodes with grad mode off
      PrecisionScope precision(precision_);
      GeneratorReplay replay(rng_);
      out = fn_(in);
    }
    COHORT_CHECK(out.defined() && out.sizes() == out_sizes_ && out.requires_grad(),
                 "backward: the checkpointed region's recomputation returned {} where its first "
                 "run returned {} requiring grad; fn must compute the same function when run again",
                 out.defined() ? fmt::format("{}{}", shape_str(out.sizes()),
                                             out.requires_grad() ? "" : " not requiring grad")
                               : std::string("an undefined tensor"),
                 shape_str(out_sizes_));
    // Where the recomputed graph meets the node's edges: the fresh inputs'
    // accumulators, and the very nodes of the outside tensors.
    std::vector<std::shared_ptr<Node>> targets;
    std::vector<size_t> slot;
    for (size_t i = 0; i < next_edges().size(); ++i) {
      if (!next_edges()[i].valid()) continue;
      targets.push_back(i < in.size() ? gradient_edge(in[i]).node : next_edges()[i].node);
      slot.push_back(i);
    }
    std::vector<Tensor> found = grad_at_nodes({out}, {grad}, targets);
    out = Tensor();
    fn_ = nullptr;  // frees what fn captured, then the saved inputs
    inputs_.clear();
    std::vector<Tensor> result(next_edges().size());
    for (size_t k = 0; k < slot.size(); ++k) result[slot[k]] = std::move(found[k]);
    return result;
  }

 private:
  CheckpointFn fn_;
  std::vector<Tensor> inputs_;
  std::vector<uint64_t> versions_;
  std::vector<bool> input_requires_grad_;
  std::vector<GeneratorSnapshot> rng_;
  PrecisionPolicy precision_;
  Shape out_sizes_;
};

// The nodes outside fn's graph that it reaches (leaves' accumulators other
// than the inputs', and nodes fn did not make), in the order found.
std::vector<Edge> outside_edges(const Edge& root,
                                const std::unordered_set<const Node*>& input_nodes,
                                const NodeCreationScope& inside) {
  std::vector<Edge> outside;
  std::unordered_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  auto visit = [&](const std::shared_ptr<Node>& n) {
    if (!n || !seen.insert(n.get()).second || input_nodes.count(n.get())) return;
    const bool leaf = dynamic_cast<const AccumulateGrad*>(n.get()) != nullptr;
    if (leaf || !inside.created(n.get())) {
      outside.push_back({n});
    } else {
      stack.push_back(n);
    }
  };
  visit(root.node);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    for (const Edge& e : n->next_edges()) visit(e.node);
  }
  return outside;
}

}  // namespace

Tensor checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs) {
  COHORT_CHECK(fn != nullptr, "checkpoint: fn is empty");
  if (!GradMode::is_enabled()) return fn(inputs);
  std::vector<Tensor> in(inputs.size());
  std::vector<bool> needs_grad(inputs.size(), false);
  std::unordered_set<const Node*> input_nodes;
  std::vector<std::shared_ptr<Node>> input_accumulators;  // leaves hold theirs weakly
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    in[i] = inputs[i].detach();
    needs_grad[i] = inputs[i].requires_grad();
    if (needs_grad[i]) {
      in[i].set_requires_grad(true);
      input_accumulators.push_back(gradient_edge(in[i]).node);
      input_nodes.insert(input_accumulators.back().get());
    }
  }
  const PrecisionPolicy precision = current_precision();
  Tensor out;
  std::vector<GeneratorSnapshot> rng;
  std::vector<Edge> edges;
  {
    NodeCreationScope inside;
    {
      GeneratorRecording recording;
      out = fn(in);
      rng = recording.snapshots();
    }
    COHORT_CHECK(out.defined(), "checkpoint: fn returned an undefined tensor");
    if (!out.requires_grad()) return out;  // nothing to differentiate
    edges.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      edges.push_back(needs_grad[i] ? gradient_edge(inputs[i]) : Edge{});
    for (Edge& e : outside_edges(gradient_edge(out), input_nodes, inside))
      edges.push_back(std::move(e));
  }
  // What the recomputation needs: the inputs' values, not their graphs.
  for (Tensor& t : in)
    if (t.defined()) t = t.detach();
  Shape sizes = out.sizes();
  Tensor result = out.detach();
  out = Tensor();  // frees fn's graph and the activations it saved
  result.autograd_meta().grad_fn =
      std::make_shared<CheckpointNode>(std::move(edges), std::move(fn), std::move(in),
                                       std::move(needs_grad), std::move(rng), precision, sizes);
  return result;
}

}  // namespace cohort::autograd
