// ParameterOwner: the owner's side of a DistributedOptimizer
// (distributed_optimizer.h). A worker that holds parameters -- a stage of a
// model split over processes, an embedding table, a shard -- registers them
// here under names, with the optimizer factory it wants them stepped with.
// DistributedOptimizers on other workers (or this one) then create optimizers
// over some of those parameters and step them remotely; each step runs here,
// on the owner, over the gradients the owner holds in the parameters' .grad
// (from its local backward, as PyTorch's DistributedOptimizer steps the
// gradients a distributed-autograd context left on each owner).
//
// RPC functions (registered on the agent; one ParameterOwner per agent):
//   dist_optim.create   str id, u32 n, n x str name  -> (empty)
//   dist_optim.step     str id                        -> (empty)
//   dist_optim.zero     str id                        -> (empty)
//   dist_optim.release  str id                        -> (empty)
//   dist_optim.fetch    u32 n, n x str name           -> tensors (copies)
//
// Failure: unknown names or optimizer ids throw InvalidArgument naming this
// owner and the name; the callers see them as the remote error.
// Thread safety: every member and handler takes one mutex, so steps of
// different optimizers run one at a time. The owner must not run backward
// over the same parameters while a remote step may run (the caller of
// step() orders the two, as the tests' trainer does).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/nn/module.h"
#include "cohort/parallel/parameter_server/parameter_server.h"
#include "cohort/rpc/rpc_agent.h"

namespace cohort::parallel {

class ParameterOwner {
 public:
  // params: handles to the owner's tensors (not copied: steps update them in
  // place). make_optimizer builds an optimizer over a subset when a
  // DistributedOptimizer asks for one.
  ParameterOwner(std::shared_ptr<rpc::RpcAgent> agent, nn::NamedTensors params,
                 OptimizerFactory make_optimizer);
  ParameterOwner(const ParameterOwner&) = delete;
  ParameterOwner& operator=(const ParameterOwner&) = delete;

  // Optimizers created by remote DistributedOptimizers and not yet released.
  size_t num_optimizers() const;
  // Steps taken by all optimizers here.
  int64_t num_steps() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the handlers
};

}  // namespace cohort::parallel
