#include "cohort/autograd/engine.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/elementwise.h"

namespace cohort::autograd {
namespace {

// The callbacks of the outermost backward running on this thread; engine
// threads of a concurrent run point at their caller's.
struct CallbackQueue {
  std::mutex mu;
  std::vector<std::function<void()>> fns;
};
thread_local CallbackQueue* tl_callbacks = nullptr;

// Runs `body` as a backward pass: the outermost one on this thread owns the
// queue and runs what was queued once body returns.
template <typename Body>
void as_backward_pass(const Body& body) {
  if (tl_callbacks != nullptr) {
    body();
    return;
  }
  CallbackQueue queue;
  tl_callbacks = &queue;
  struct Reset {
    ~Reset() { tl_callbacks = nullptr; }
  } reset;
  body();
  for (size_t i = 0;; ++i) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> lock(queue.mu);
      if (i >= queue.fns.size()) break;
      fn = std::move(queue.fns[i]);
    }
    fn();
  }
}

struct Later {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else if (slot.dtype() == g.dtype() && slot.sizes() == g.sizes()) {
    // A new tensor (either operand may alias a tensor owned elsewhere), in
    // one pass: a residual connection's two gradients meet here every block.
    slot = native::binary(native::BinaryOp::kAdd, slot, g);
  } else {
    Tensor s = slot.clone();
    s.add_(g);
    slot = s;
  }
}

// Root gradients checked and defaulted (ones for one-element roots).
std::vector<std::pair<std::shared_ptr<Node>, Tensor>> root_seeds(const std::vector<Tensor>& roots,
                                                                 const std::vector<Tensor>& grads,
                                                                 const char* op) {
  COHORT_CHECK(roots.size() == grads.size(), "{}: {} roots but {} gradients", op, roots.size(),
               grads.size());
  std::vector<std::pair<std::shared_ptr<Node>, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    COHORT_CHECK(r.requires_grad(),
                 "{}: tensor does not require grad and has no grad_fn (did every input "
                 "have requires_grad false, or was it computed under NoGradGuard?)",
                 op);
    Tensor g = grads[i];
    if (!g.defined()) {
      COHORT_CHECK(r.numel() == 1,
                   "{}: grad can be implied only for one-element outputs, got shape {}", op,
                   shape_str(r.sizes()));
      g = Tensor::ones(r.sizes(), r.dtype(), r.device());
    } else {
      COHORT_CHECK(g.sizes() == r.sizes(), "{}: gradient shape {} differs from output {}", op,
                   shape_str(g.sizes()), shape_str(r.sizes()));
    }
    seeds.emplace_back(gradient_edge(r).node, g);
  }
  return seeds;
}

std::vector<bool> valid_edges(const Node* n) {
  std::vector<bool> m(n->next_edges().size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = n->next_edges()[i].valid();
  return m;
}

// One pass of the engine over the subgraph reached from `seeds` along the
// edges that mask_of(node) selects. A node runs (run_node(node, grad, mask))
// once all selected edges into it have delivered; gradients summed per node.
// Nodes that no gradient reached are skipped with their subgraph.
using MaskFn = std::function<std::vector<bool>(Node*)>;
using RunFn = std::function<std::vector<Tensor>(const std::shared_ptr<Node>&, const Tensor&,
                                                const std::vector<bool>&)>;

class GraphRun {
 public:
  GraphRun(const std::vector<std::pair<std::shared_ptr<Node>, Tensor>>& seeds,
           const MaskFn& mask_of, RunFn run_node)
      : run_node_(std::move(run_node)) {
    std::vector<Node*> stack;
    for (const auto& [node, g] : seeds) {
      accumulate(buffers_[node.get()], g);
      if (!info_.count(node.get())) {
        info_[node.get()] = {node, mask_of(node.get())};
        stack.push_back(node.get());
        starts_.push_back(node.get());
      }
    }
    // Count, for every reachable node, the selected edges that point to it.
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      const std::vector<bool>& mask = info_.at(n).mask;
      const auto& edges = n->next_edges();
      for (size_t i = 0; i < edges.size(); ++i) {
        if (!mask[i]) continue;
        Node* next = edges[i].node.get();
        ++deps_[next];
        if (!info_.count(next)) {
          info_[next] = {edges[i].node, mask_of(next)};
          stack.push_back(next);
        }
        max_branches_ = std::max(max_branches_, next->concurrent_branches());
      }
    }
    for (Node* s : starts_) max_branches_ = std::max(max_branches_, s->concurrent_branches());
  }

  // Runs the graph. A graph holding nodes made by concurrent branches
  // (Node::concurrent_branches() > 1) runs its ready nodes on up to that many
  // threads, capped by the caller's thread budget, each with its share of
  // the budget; any other graph runs on the caller's thread alone, in the
  // deterministic latest-first order.
  void execute() {
    const int budget = num_threads();
    const int workers = std::min(max_branches_, budget);
    if (workers <= 1) {
      execute_serial();
    } else {
      execute_concurrent(workers, std::max(1, budget / workers));
    }
  }

 private:
  void execute_serial() {
    std::priority_queue<Node*, std::vector<Node*>, Later> ready;
    for (Node* s : starts_)
      if (deps_[s] == 0) ready.push(s);
    while (!ready.empty()) {
      Node* n = ready.top();
      ready.pop();
      Tensor g = std::move(buffers_[n]);
      buffers_.erase(n);
      const NodeInfo& info = info_.at(n);
      std::vector<Tensor> out = run_node_(info.self, g, info.mask);
      g = Tensor();
      release_edges(n, out, [&](Node* r) { ready.push(r); });
    }
  }

  // Buffers, dependency counts and the ready queue are guarded by mu; nodes
  // run outside it. Leaves (AccumulateGrad) run one at a time, so grad-ready
  // hooks (e.g. DDP's reducer) are never called concurrently. The first
  // exception stops the other threads after their current node and is
  // rethrown here once all have stopped.
  void execute_concurrent(int workers, int per_thread_budget) {
    std::mutex mu;
    std::condition_variable cv;
    std::mutex leaf_mu;
    std::priority_queue<Node*, std::vector<Node*>, Later> ready;
    int running = 0;
    std::exception_ptr error;
    for (Node* s : starts_)
      if (deps_[s] == 0) ready.push(s);
    CallbackQueue* callbacks = tl_callbacks;
    auto work = [&] {
      NoGradGuard no_grad;  // grad mode is per thread
      CallbackQueue* const saved_callbacks = tl_callbacks;
      tl_callbacks = callbacks;
      struct Restore {
        CallbackQueue* saved;
        ~Restore() { tl_callbacks = saved; }
      } restore{saved_callbacks};
      ThreadBudgetGuard budget(per_thread_budget);
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        cv.wait(lock, [&] { return error || !ready.empty() || running == 0; });
        if (error || ready.empty()) break;  // failed, or nothing left anywhere
        Node* n = ready.top();
        ready.pop();
        Tensor g = std::move(buffers_[n]);
        buffers_.erase(n);
        const NodeInfo& info = info_.at(n);
        ++running;
        lock.unlock();
        std::vector<Tensor> out;
        std::exception_ptr failed;
        try {
          if (dynamic_cast<AccumulateGrad*>(n) != nullptr) {
            std::lock_guard<std::mutex> leaf(leaf_mu);
            out = run_node_(info.self, g, info.mask);
          } else {
            out = run_node_(info.self, g, info.mask);
          }
          g = Tensor();
        } catch (...) {
          failed = std::current_exception();
        }
        lock.lock();
        --running;
        if (!failed) {
          try {
            release_edges(n, out, [&](Node* r) { ready.push(r); });
          } catch (...) {
            failed = std::current_exception();
          }
        }
        if (failed && !error) error = failed;
        cv.notify_all();
        out.clear();
      }
    };
    {
      std::vector<std::jthread> helpers;
      try {
        for (int i = 1; i < workers; ++i) helpers.emplace_back(work);
      } catch (...) {
        // Could not start a thread: the caller and those started finish it.
      }
      work();
    }  // joins the helpers
    if (error) std::rethrow_exception(error);
  }

  // Delivers n's outputs along its selected edges; calls push for every node
  // that became ready.
  template <typename Push>
  void release_edges(Node* n, const std::vector<Tensor>& out, const Push& push) {
    const auto& edges = n->next_edges();
    const std::vector<bool>& mask = info_.at(n).mask;
    std::vector<Node*> skip;
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!mask[i]) continue;
      Node* next = edges[i].node.get();
      if (i < out.size() && out[i].defined()) accumulate(buffers_[next], out[i]);
      if (--deps_[next] == 0) {
        auto it = buffers_.find(next);
        if (it != buffers_.end() && it->second.defined()) {
          push(next);
        } else {
          if (it != buffers_.end()) buffers_.erase(it);
          skip.push_back(next);  // no gradient reached it: skip its subgraph
        }
      }
    }
    // Skipped nodes still release their dependants so counts stay right.
    while (!skip.empty()) {
      Node* s = skip.back();
      skip.pop_back();
      const auto& se = s->next_edges();
      const std::vector<bool>& sm = info_.at(s).mask;
      for (size_t i = 0; i < se.size(); ++i) {
        if (!sm[i]) continue;
        Node* next = se[i].node.get();
        if (--deps_[next] == 0) {
          auto it = buffers_.find(next);
          if (it != buffers_.end() && it->second.defined())
            push(next);
          else
            skip.push_back(next);
        }
      }
    }
  }

  RunFn run_node_;
  std::unordered_map<Node*, Tensor> buffers_;
  std::unordered_map<Node*, int64_t> deps_;
  struct NodeInfo {
    std::shared_ptr<Node> self;
    std::vector<bool> mask;
  };
  std::unordered_map<Node*, NodeInfo> info_;
  std::vector<Node*> starts_;
  int max_branches_ = 1;
};

std::vector<Tensor> run_whole(const std::shared_ptr<Node>& n, const Tensor& g,
                              const std::vector<bool>&) {
  return n->apply(g);
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  auto seeds = root_seeds(roots, grads, "backward");
  NoGradGuard no_grad;
  as_backward_pass([&] {
    GraphRun run(seeds, valid_edges, run_whole);
    run.execute();
  });
}

void queue_callback(std::function<void()> fn) {
  COHORT_CHECK(tl_callbacks != nullptr,
               "queue_callback: called outside a backward pass (from a node or a grad-ready "
               "hook while backward runs)");
  std::lock_guard<std::mutex> lock(tl_callbacks->mu);
  tl_callbacks->fns.push_back(std::move(fn));
}

bool in_backward() { return tl_callbacks != nullptr; }

std::vector<Tensor> grad_at_nodes(const std::vector<Tensor>& roots,
                                  const std::vector<Tensor>& grads,
                                  const std::vector<std::shared_ptr<Node>>& targets) {
  auto seeds = root_seeds(roots, grads, "grad");
  std::unordered_map<Node*, size_t> first;  // a node named twice gets one gradient, copied
  for (size_t i = 0; i < targets.size(); ++i) {
    COHORT_CHECK(targets[i] != nullptr, "grad: target {} is null", i);
    first.emplace(targets[i].get(), i);
  }
  std::vector<Tensor> out(targets.size());
  NoGradGuard no_grad;
  auto mask_of = [&](Node* n) {
    // The graph behind a target is not needed.
    return first.count(n) ? std::vector<bool>(n->next_edges().size(), false) : valid_edges(n);
  };
  // Distinct nodes write distinct slots, so engine threads need no lock.
  auto run_node = [&](const std::shared_ptr<Node>& n, const Tensor& g,
                      const std::vector<bool>&) -> std::vector<Tensor> {
    auto it = first.find(n.get());
    if (it != first.end()) {
      out[it->second] = g;
      return {};
    }
    if (dynamic_cast<AccumulateGrad*>(n.get()) != nullptr) return {};  // not asked for
    return n->apply(g);
  };
  as_backward_pass([&] {
    GraphRun run(seeds, mask_of, run_node);
    run.execute();
  });
  for (size_t i = 0; i < targets.size(); ++i) {
    size_t f = first.at(targets[i].get());
    if (f != i) out[i] = out[f];
  }
  return out;
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs) {
  std::vector<std::shared_ptr<Node>> targets;
  targets.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    COHORT_CHECK(inputs[i].defined() && inputs[i].requires_grad(),
                 "grad: inputs[{}] must be a tensor that requires grad, got {}", i,
                 inputs[i].defined() ? "one that does not" : "an undefined tensor");
    targets.push_back(gradient_edge(inputs[i]).node);
  }
  return grad_at_nodes(roots, grads, targets);
}

// ---- split backward ----

struct DeferredGradients::State {
  // Where W starts: gradients for nodes that B did not run (roots that lead
  // to no input; children of nodes that B ran whole) ...
  std::vector<std::pair<std::shared_ptr<Node>, Tensor>> seeds;
  // ... and the nodes that B ran in part, with the edges W still owes.
  std::unordered_map<Node*, std::vector<bool>> partial;
};

DeferredGradients::DeferredGradients() = default;
DeferredGradients::DeferredGradients(DeferredGradients&&) noexcept = default;
DeferredGradients& DeferredGradients::operator=(DeferredGradients&&) noexcept = default;
DeferredGradients::~DeferredGradients() = default;

bool DeferredGradients::empty() const { return !state_ || state_->seeds.empty(); }

void DeferredGradients::run() {
  if (empty()) return;
  // Taken out first: whatever happens, W runs at most once.
  std::unique_ptr<State> st = std::move(state_);
  NoGradGuard no_grad;
  auto mask_of = [&](Node* n) {
    auto it = st->partial.find(n);
    return it != st->partial.end() ? it->second : valid_edges(n);
  };
  auto run_node = [&](const std::shared_ptr<Node>& n, const Tensor& g,
                      const std::vector<bool>& mask) {
    if (st->partial.count(n.get())) return n->apply(g, mask, /*release=*/true);
    return n->apply(g);
  };
  as_backward_pass([&] {
    GraphRun run(st->seeds, mask_of, run_node);
    run.execute();
  });
}

DeferredGradients run_backward_split(const std::vector<Tensor>& roots,
                                     const std::vector<Tensor>& grads,
                                     const std::vector<Tensor>& inputs) {
  auto seeds = root_seeds(roots, grads, "backward (split)");
  std::unordered_set<Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    COHORT_CHECK(in.defined() && in.requires_grad() && in.is_leaf(),
                 "backward (split): inputs[{}] must be a leaf tensor that requires grad (e.g. "
                 "x.detach().set_requires_grad(true)); got {}",
                 i,
                 !in.defined()         ? "an undefined tensor"
                 : !in.requires_grad() ? "one that does not require grad"
                                       : "a non-leaf (it has a grad_fn)");
    targets.insert(gradient_edge(in).node.get());
  }
  NoGradGuard no_grad;
  // leads[n]: some path from n reaches a target. Post-order over the graph.
  std::unordered_map<Node*, bool> leads;
  {
    std::vector<std::pair<Node*, size_t>> stack;
    for (const auto& s : seeds) {
      if (leads.count(s.first.get())) continue;
      leads[s.first.get()] = targets.count(s.first.get()) > 0;
      stack.emplace_back(s.first.get(), 0);
      while (!stack.empty()) {
        auto& [n, i] = stack.back();
        const auto& edges = n->next_edges();
        if (i == edges.size()) {
          Node* done = n;
          stack.pop_back();
          if (!stack.empty() && leads[done]) leads[stack.back().first] = true;
          continue;
        }
        Node* next = edges[i++].node.get();
        if (!next) continue;
        auto it = leads.find(next);
        if (it != leads.end()) {
          if (it->second) leads[n] = true;
          continue;
        }
        leads[next] = targets.count(next) > 0;
        stack.emplace_back(next, 0);
      }
    }
  }
  auto state = std::make_unique<DeferredGradients::State>();
  std::vector<std::pair<std::shared_ptr<Node>, Tensor>> b_seeds;
  for (auto& s : seeds) (leads[s.first.get()] ? b_seeds : state->seeds).push_back(s);
  auto split_mask = [&](Node* n, bool to_targets) {
    std::vector<bool> m(n->next_edges().size());
    for (size_t i = 0; i < m.size(); ++i) {
      Node* next = n->next_edges()[i].node.get();
      m[i] = next != nullptr && leads.at(next) == to_targets;
    }
    return m;
  };
  auto b_mask = [&](Node* n) { return split_mask(n, true); };
  std::mutex state_mu;  // b_run may be called from several engine threads
  auto b_run = [&](const std::shared_ptr<Node>& n, const Tensor& g, const std::vector<bool>& mask) {
    std::vector<bool> w = split_mask(n.get(), false);
    if (std::find(w.begin(), w.end(), true) == w.end()) return n->apply(g);
    if (n->can_apply_in_parts()) {
      std::vector<Tensor> out = n->apply(g, mask, /*release=*/false);
      // The seed's shared_ptr keeps the node (and what it saved) alive for W
      // even when the caller drops the roots.
      std::lock_guard<std::mutex> lock(state_mu);
      state->partial[n.get()] = w;
      state->seeds.emplace_back(n, g);
      return out;
    }
    // Run whole now; W receives the gradients of the other edges.
    std::vector<Tensor> out = n->apply(g);
    std::lock_guard<std::mutex> lock(state_mu);
    for (size_t i = 0; i < w.size(); ++i)
      if (w[i] && i < out.size() && out[i].defined())
        state->seeds.emplace_back(n->next_edges()[i].node, out[i]);
    return out;
  };
  as_backward_pass([&] {
    GraphRun run(b_seeds, b_mask, b_run);
    run.execute();
  });
  DeferredGradients d;
  if (!state->seeds.empty()) d.state_ = std::move(state);
  return d;
}

}  // namespace cohort::autograd

namespace cohort {

void Tensor::backward() const { autograd::run_backward({*this}, {Tensor()}); }

void Tensor::backward(const Tensor& grad) const { autograd::run_backward({*this}, {grad}); }

}  // namespace cohort
