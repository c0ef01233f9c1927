#include "cohort/parallel/inter_op/branch_context.h"

#include <algorithm>

#include "cohort/autograd/grad_mode.h"

namespace cohort::parallel {

BranchContext BranchContext::capture(int branches, int num_threads) {
  BranchContext c;
  c.grad_enabled = GradMode::is_enabled();
  c.num_threads = std::max(num_threads, 1);
  c.branches = std::max(branches, 1);
  c.sequence_start = autograd::next_sequence_nr();
  return c;
}

int branch_share(int budget, int branches) { return std::max(1, budget / std::max(branches, 1)); }

BranchScope::BranchScope(const BranchContext& context)
    : saved_grad_enabled_(GradMode::is_enabled()),
      budget_(context.num_threads),
      marks_(context.branches, context.sequence_start) {
  GradMode::set_enabled(context.grad_enabled);
}

BranchScope::~BranchScope() { GradMode::set_enabled(saved_grad_enabled_); }

}  // namespace cohort::parallel
