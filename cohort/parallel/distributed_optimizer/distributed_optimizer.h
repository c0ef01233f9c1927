// DistributedOptimizer: steps parameters that live on other workers, each on
// its owner, through RPC (PyTorch's torch.distributed.optim.DistributedOptimizer).
//
//   // on each owner: its parameters and the optimizer it wants
//   ParameterOwner owner(agent, stage->named_parameters(), [](std::vector<Tensor> p) {
//     return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.05});
//   });
//   // on the driver:
//   DistributedOptimizer opt(agent, {{"w1", "fc1.weight"}, {"w1", "fc1.bias"},
//                                    {"w2", "fc2.weight"}});
//   ... each owner computes its gradients (its local backward) ...
//   opt.step();       // every owner steps its optimizer, all at once
//   opt.zero_grad();
//
// References are (owner worker name, parameter name) pairs: the owner
// registered the name in its ParameterOwner. The constructor asks each owner
// to build one optimizer over the referenced parameters it holds, with the
// owner's factory (C++ cannot ship the optimizer class as PyTorch ships a
// Python class; the owner decides, which also keeps the hyperparameters
// where the parameters are). step() and zero_grad() send one call per owner,
// in parallel, and return when all succeeded. The remote optimizers hold
// their state (momentum, Adam moments) on the owners, between steps.
//
// Failure: every call has options.timeout as deadline. The first owner that
// fails (PeerLost when it died, its handler's error, TimeoutError) fails the
// call at once with an error naming the owner and the operation; the other
// owners may have stepped (as in PyTorch, a failed distributed step leaves
// the owners' parameters out of step with each other).
// Ownership: the destructor releases the remote optimizers (best effort,
// errors ignored). Thread safety: one thread drives an optimizer.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/rpc/rpc_agent.h"

namespace cohort::parallel {

struct ParamRef {
  std::string owner;  // the RPC worker name of the owner
  std::string name;   // the name it registered the parameter under
};

struct DistributedOptimizerOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(std::shared_ptr<rpc::RpcAgent> agent, std::vector<ParamRef> params,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Every owner steps its optimizer over its referenced parameters.
  void step();
  // Every owner zeroes the gradients of its referenced parameters.
  void zero_grad();
  // Copies of the referenced parameters' current values, in `params` order
  // (tests; a driver that saves a checkpoint).
  std::vector<Tensor> fetch();

  // The owners, in the order of their first reference.
  const std::vector<std::string>& owners() const { return owners_; }
  // This optimizer's id on the owners.
  const std::string& id() const { return id_; }

 private:
  std::vector<rpc::Message> call_owners(const char* fn, std::vector<rpc::Message> msgs,
                                        const char* op);

  std::shared_ptr<rpc::RpcAgent> agent_;
  std::vector<ParamRef> params_;
  DistributedOptimizerOptions options_;
  std::vector<std::string> owners_;
  std::vector<std::vector<size_t>> refs_of_;  // per owner: indices into params_
  std::string id_;
};

}  // namespace cohort::parallel
