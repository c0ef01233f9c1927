// ParallelBranches: inter-op parallelism inside one layer. Its branches
// (modules) are all applied to the same input at the same time, each on a
// thread of its own (the first on the calling thread), and their outputs are
// joined into one tensor:
//
//   Generator gen(0);
//   auto layer = std::make_shared<cohort::parallel::ParallelBranches>(
//       std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(8, 4, gen),
//                                  std::make_shared<nn::Linear>(8, 6, gen)},
//       ParallelBranchesOptions{.join = JoinMode::kConcat, .dim = 1});
//   Tensor y = layer->forward(x);       // [N, 10]
//   sum(y).backward();                  // the branches' backwards run concurrently too
//
// Names: the branches are children "0", "1", ... so parameters are named
// "0.weight", "1.bias", as in an nn.Sequential.
// Threads: with k branches and the caller's budget B (num_threads()), each
// branch runs with max(1, B / k) intra-op threads, so k x share <= B whenever
// B >= k; its autograd nodes are marked so that backward runs the branches'
// nodes on up to min(k, B) threads (autograd/engine.h). Grad mode is the
// caller's in every branch. Threads are started per forward and joined
// before forward returns (RAII; none outlives the call).
// Results: outputs and gradients equal running the branches one after the
// other and joining them (up to float rounding of gradient sums).
// Failure: if branches throw, forward waits for all of them and throws a
// cohort::Error naming the first failing branch (by index), with its
// exception nested. Thread safety: as Module (the branches must tolerate
// running beside each other; a module shared by two branches must hold no
// per-call state).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/nn/module.h"

namespace cohort::parallel {

enum class JoinMode {
  kConcat,  // cat(outputs, dim)
  kSum,     // outputs[0] + outputs[1] + ... (same shapes)
  kStack,   // stack(outputs, dim)
};

struct ParallelBranchesOptions {
  JoinMode join = JoinMode::kConcat;
  int64_t dim = 1;  // for kConcat and kStack
  // When set, joins the outputs instead of `join` (called on the caller's
  // thread, under the caller's grad mode).
  std::function<Tensor(const std::vector<Tensor>&)> join_fn = {};
};

class ParallelBranches : public nn::Cloneable<ParallelBranches> {
 public:
  // Throws InvalidArgument for no branches or a null one.
  explicit ParallelBranches(std::vector<nn::ModulePtr> branches,
                            ParallelBranchesOptions options = {});

  // The branches' outputs joined.
  Tensor forward(const Tensor& input) override;
  // The branches' outputs, in branch order, before the join.
  std::vector<Tensor> forward_branches(const Tensor& input);

  size_t size() const { return num_children(); }
  const ParallelBranchesOptions& options() const { return options_; }
  std::string extra_repr() const override;

 private:
  ParallelBranchesOptions options_;
};

}  // namespace cohort::parallel
