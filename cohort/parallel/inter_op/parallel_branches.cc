#include "cohort/parallel/inter_op/parallel_branches.h"

#include <fmt/format.h>
#include <exception>
#include <thread>

#include "cohort/autograd/node.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/parallel/inter_op/branch_context.h"

namespace cohort::parallel {

ParallelBranches::ParallelBranches(std::vector<nn::ModulePtr> branches,
                                   ParallelBranchesOptions options)
    : Cloneable("ParallelBranches"), options_(std::move(options)) {
  COHORT_CHECK(!branches.empty(), "ParallelBranches: needs at least one branch");
  for (size_t i = 0; i < branches.size(); ++i) {
    COHORT_CHECK(branches[i] != nullptr, "ParallelBranches: branch {} is null", i);
    register_module(std::to_string(i), std::move(branches[i]));
  }
}

std::string ParallelBranches::extra_repr() const {
  if (options_.join_fn) return "join=custom";
  switch (options_.join) {
    case JoinMode::kConcat:
      return fmt::format("join=concat, dim={}", options_.dim);
    case JoinMode::kSum:
      return "join=sum";
    case JoinMode::kStack:
      return fmt::format("join=stack, dim={}", options_.dim);
  }
  return "";
}

std::vector<Tensor> ParallelBranches::forward_branches(const Tensor& input) {
  const size_t k = num_children();
  std::vector<Tensor> outs(k);
  std::vector<std::exception_ptr> errors(k);
  std::vector<uint64_t> sequence_end(k, 0);
  const BranchContext context =
      BranchContext::capture(static_cast<int>(k), branch_share(num_threads(), static_cast<int>(k)));
  auto run = [&](size_t i) {
    BranchScope scope(context);
    try {
      outs[i] = child<nn::Module>(i).forward(input);
    } catch (...) {
      errors[i] = std::current_exception();
    }
    sequence_end[i] = autograd::next_sequence_nr();
  };
  {
    std::vector<std::jthread> threads;
    threads.reserve(k - 1);
    try {
      for (size_t i = 1; i < k; ++i) threads.emplace_back(run, i);
    } catch (...) {
      // Could not start a thread: the started ones are joined below; the
      // branches without one run here, one after the other.
      for (size_t i = threads.size() + 1; i < k; ++i) run(i);
    }
    run(0);
  }  // joins
  for (uint64_t s : sequence_end) autograd::advance_next_sequence_nr(s);
  for (size_t i = 0; i < k; ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      std::throw_with_nested(Error(fmt::format("ParallelBranches: branch {} ({}) failed: {}", i,
                                               child<nn::Module>(i).describe(), e.what())));
    } catch (...) {
      std::throw_with_nested(
          Error(fmt::format("ParallelBranches: branch {} ({}) failed with a non-standard exception",
                            i, child<nn::Module>(i).describe())));
    }
  }
  return outs;
}

Tensor ParallelBranches::forward(const Tensor& input) {
  std::vector<Tensor> outs = forward_branches(input);
  if (options_.join_fn) return options_.join_fn(outs);
  switch (options_.join) {
    case JoinMode::kConcat:
      return cat(outs, options_.dim);
    case JoinMode::kStack:
      return stack(outs, options_.dim);
    case JoinMode::kSum: {
      Tensor total = outs[0];
      for (size_t i = 1; i < outs.size(); ++i) total = total + outs[i];
      return total;
    }
  }
  throw InvalidArgument("ParallelBranches: unknown join mode");
}

}  // namespace cohort::parallel
