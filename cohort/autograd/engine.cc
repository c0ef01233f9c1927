#include "cohort/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"

namespace cohort::autograd {
namespace {

struct Later {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else {
    // A new tensor: either operand may alias a tensor owned elsewhere.
    Tensor s = slot.clone();
    s.add_(g);
    slot = s;
  }
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  COHORT_CHECK(roots.size() == grads.size(), "backward: {} roots but {} gradients", roots.size(),
               grads.size());
  NoGradGuard no_grad;
  std::unordered_map<Node*, Tensor> buffers;
  std::unordered_map<Node*, int64_t> deps;
  std::vector<std::shared_ptr<Node>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    COHORT_CHECK(r.requires_grad(),
                 "backward: tensor does not require grad and has no grad_fn (did every input "
                 "have requires_grad false, or was it computed under NoGradGuard?)");
    Tensor g = grads[i];
    if (!g.defined()) {
      COHORT_CHECK(r.numel() == 1,
                   "backward: grad can be implied only for one-element outputs, got shape {}",
                   shape_str(r.sizes()));
      g = Tensor::ones(r.sizes(), r.dtype());
    } else {
      COHORT_CHECK(g.sizes() == r.sizes(), "backward: gradient shape {} differs from output {}",
                   shape_str(g.sizes()), shape_str(r.sizes()));
    }
    Edge e = gradient_edge(r);
    accumulate(buffers[e.node.get()], g);
    starts.push_back(e.node);
  }
  // Count, for every reachable node, the edges that point to it.
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& s : starts) {
    if (!seen[s.get()]) {
      seen[s.get()] = true;
      stack.push_back(s.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.node.get()];
      if (!seen[e.node.get()]) {
        seen[e.node.get()] = true;
        stack.push_back(e.node.get());
      }
    }
  }
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  for (auto& s : starts) {
    if (deps[s.get()] == 0 && seen[s.get()]) {
      seen[s.get()] = false;  // enqueue once
      ready.push(s.get());
    }
  }
  // Keep nodes alive while running even if their owners release them.
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g = std::move(buffers[n]);
    buffers.erase(n);
    std::vector<Tensor> out = n->apply(g);
    g = Tensor();
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].valid()) continue;
      Node* next = edges[i].node.get();
      if (i < out.size() && out[i].defined()) accumulate(buffers[next], out[i]);
      if (--deps[next] == 0) {
        if (buffers.count(next) && buffers[next].defined()) {
          ready.push(next);
        } else {
          buffers.erase(next);  // no gradient reached it: skip its subgraph
          // Still release dependants so their counts stay right.
          std::vector<Node*> skip{next};
          while (!skip.empty()) {
            Node* s = skip.back();
            skip.pop_back();
            for (const Edge& e : s->next_edges()) {
              if (!e.valid()) continue;
              if (--deps[e.node.get()] == 0) {
                if (buffers.count(e.node.get()) && buffers[e.node.get()].defined())
                  ready.push(e.node.get());
                else
                  skip.push_back(e.node.get());
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace cohort::autograd

namespace cohort {

void Tensor::backward() const { autograd::run_backward({*this}, {Tensor()}); }

void Tensor::backward(const Tensor& grad) const { autograd::run_backward({*this}, {grad}); }

}  // namespace cohort
