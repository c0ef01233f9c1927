// ParameterServerClient: a trainer's end of a parameter-server job. The
// trainer keeps a whole local model for forward and backward; the weights
// live on the servers (ParameterServerService), sharded by assign_shards, so
// the client needs only the servers' RPC names and this trainer's index.
//
//   ParameterServerClient client(agent, model, servers, trainer_index);
//   for (step...) {
//     client.pull();                           // the servers' weights -> model
//     model->zero_grad();
//     nll_loss(model->forward(x), y).backward();
//     // optional: clip the local gradients here (the servers cannot: each
//     // sees one shard, clipping needs the norm over the whole model)
//     client.push();                           // model's gradients -> servers
//   }
//   client.finish();
//
// pull() and push() talk to every server at once (rpc_async in parallel) and
// return when all replied. pull() writes the weights straight into the
// model's parameter tensors (one copy out of the received bytes); push()
// sends the gradients from where they are (no copy) and returns after the
// servers have them, so the next backward may overwrite them.
//
// full_state_dict() is the model as a single-process run would save it: the
// servers' weights under the model's names, plus the model's own buffers.
// Before finish() it reads what the next pull() would see (in sync mode: the
// weights after this trainer's last step, on every shard alike); after
// finish() the servers' current weights; load_full_state_dict() puts such a state (a resume) into
// the servers and the local model.
//
// Failure: every call has options.timeout as its deadline; keep it above the
// servers' ParameterServerOptions::timeout, so that a server that gives up
// waiting for another trainer reports why before this client's deadline.
// Errors keep their class (PeerLost when a server died, TimeoutError, the
// server's own errors) and name this trainer, the step, the operation and
// the server: "trainer 'w2' (worker 1): pull of step 7 from server 'ps0'
// failed: ...". The client waits for the first failure, not for every server:
// a dead server fails the step as soon as the RPC layer sees it.
//
// Thread safety: one thread drives a client (like a training loop).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/tensor_dict.h"
#include "cohort/nn/module.h"
#include "cohort/parallel/parameter_server/parameter_server.h"
#include "cohort/parallel/parameter_server/shard_assignment.h"
#include "cohort/rpc/rpc_agent.h"

namespace cohort::parallel {

struct ParameterServerClientOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(90);
};

class ParameterServerClient {
 public:
  // servers: the RPC names of the servers, in server-index order (the order
  // every process passes). worker: this trainer's index among the trainers.
  ParameterServerClient(std::shared_ptr<rpc::RpcAgent> agent, std::shared_ptr<nn::Module> model,
                        std::vector<std::string> servers, int worker,
                        ParameterServerClientOptions options = {});

  // Fetches every shard's weights of step clock() into the model.
  void pull();
  // Sends the model's gradients of step clock() and advances the clock.
  void push();
  // Tells every server this trainer is done (no more pulls or pushes).
  void finish();

  // Steps pushed so far (the step the next pull is for).
  int64_t clock() const { return clock_; }
  int worker() const { return worker_; }
  // The servers' versions seen by the last pull (optimizer steps taken).
  const std::vector<int64_t>& versions() const { return versions_; }
  const ShardAssignment& assignment() const { return assignment_; }
  const std::vector<std::string>& servers() const { return servers_; }

  TensorDict full_state_dict();
  void load_full_state_dict(const TensorDict& state);
  // The servers' optimizer states, one per server (parameter indices in
  // each shard optimizer's order); load_optimizer_state_dicts sends one to
  // each server (a resume).
  std::vector<TensorDict> optimizer_state_dicts();
  void load_optimizer_state_dicts(const std::vector<TensorDict>& states);
  std::vector<ParameterServerStats> server_stats();

 private:
  // Calls fn on every server with msgs[s]; returns the replies, or throws the
  // first failure with `op` and the server named.
  std::vector<rpc::Message> call_all(const char* fn, std::vector<rpc::Message> msgs,
                                     const std::string& op);
  std::string who() const;

  std::shared_ptr<rpc::RpcAgent> agent_;
  std::shared_ptr<nn::Module> model_;
  std::vector<std::string> servers_;
  int worker_;
  ParameterServerClientOptions options_;
  nn::NamedTensors params_;
  ShardAssignment assignment_;
  int64_t clock_ = 0;
  std::vector<int64_t> versions_;
  bool finished_ = false;
};

}  // namespace cohort::parallel
