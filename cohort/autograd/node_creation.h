// NodeCreationScope: which graph nodes a piece of code made, for activation
// checkpointing (checkpoint.cc), which must tell the nodes of a region's own
// graph from the nodes outside it that the region reaches. Node's constructor
// (node.cc) reports to every scope open on its thread; nodes made on other
// threads are not seen. Thread-local, like grad mode: open and close it on
// one thread, as a scope. Addresses only: a recorded node may since have been
// freed.
#pragma once

#include <unordered_set>

namespace cohort::autograd {

class Node;

class NodeCreationScope {
 public:
  NodeCreationScope();
  ~NodeCreationScope();
  NodeCreationScope(const NodeCreationScope&) = delete;
  NodeCreationScope& operator=(const NodeCreationScope&) = delete;

  bool created(const Node* n) const { return created_.count(n) > 0; }

  // Called by Node's constructor.
  static void note(const Node* n);

 private:
  NodeCreationScope* outer_;
  std::unordered_set<const Node*> created_;
};

}  // namespace cohort::autograd
