// What a thread running an inter-op branch inherits from the thread that
// started it: grad mode, an intra-op thread budget, and the autograd marks
// that let the backward engine run the branches' backwards concurrently
// (autograd::ConcurrentBranchScope). Grad mode and the budget are
// thread-local in cohort, so a fresh thread would otherwise see grad mode on
// and the process default budget.
//
// BranchContext is captured on the forking thread; a BranchScope applies it
// on the branch's thread for the branch's duration and restores that
// thread's previous settings on exit. Both are plain values / RAII guards
// with no shared state; a scope must be destroyed on the thread that made it.
#pragma once

#include <cstdint>

#include "cohort/autograd/node.h"
#include "cohort/base/parallel.h"

namespace cohort::parallel {

struct BranchContext {
  bool grad_enabled = true;
  int num_threads = 1;          // the branch's intra-op budget (>= 1)
  int branches = 1;             // how many branches run concurrently
  uint64_t sequence_start = 0;  // the forking thread's next autograd sequence number

  // The calling thread's grad mode and sequence number; `branches`
  // concurrent branches each getting `num_threads` intra-op threads
  // (clamped to >= 1).
  static BranchContext capture(int branches, int num_threads);
};

// The caller's budget split over `branches` (at least 1 each), so that
// branches x share <= budget whenever budget >= branches.
int branch_share(int budget, int branches);

class BranchScope {
 public:
  explicit BranchScope(const BranchContext& context);
  ~BranchScope();
  BranchScope(const BranchScope&) = delete;
  BranchScope& operator=(const BranchScope&) = delete;

 private:
  bool saved_grad_enabled_;
  ThreadBudgetGuard budget_;
  autograd::ConcurrentBranchScope marks_;
};

}  // namespace cohort::parallel
