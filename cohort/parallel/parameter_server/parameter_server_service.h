// ParameterServerService: puts a ParameterServer (parameter_server.h) on an
// RPC agent. It registers the "ps.*" functions (ps_protocol.h) that trainers'
// ParameterServerClients call, and runs a liveness monitor that finds lost
// trainers: a server otherwise only hears from trainers when they call, and a
// dead trainer never calls again.
//
// The monitor wakes every probe_interval and probes ("ps.alive", deadline
// probe_timeout) the active trainers that a pull is waiting for or that have
// been silent longer than probe_interval. A probe that fails with PeerLost
// (the RPC layer saw the trainer's connection close) drops the trainer with
// that cause. In kSsp/kAsync a trainer silent for longer than the server's
// timeout is dropped too (a hung process counts as lost; its later calls are
// refused). In kSync dropping fails the server (see parameter_server.h), so
// every trainer's next pull fails naming the lost trainer.
//
// Layouts: servers and trainers are RPC worker names; a process may be both
// (co-located) or only one (BytePS's separate servers). One service per agent
// (the function names are fixed).
//
// Handler threads: a pull may block in the server (sync and ssp) on one of
// the agent's handler threads, so the agent needs more handler threads than
// trainers, or the push that would release the waiting pulls finds no thread
// (the constructor checks RpcOptions::num_handler_threads > trainers).
//
// Ownership: shares the ParameterServer and the agent. The destructor stops
// the monitor; the handlers stay registered (the agent outlives them, and
// they keep the server alive). Shut the agent down after wait_done().
// Thread safety: all members may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/nn/module.h"
#include "cohort/parallel/parameter_server/parameter_server.h"
#include "cohort/parallel/parameter_server/shard_assignment.h"
#include "cohort/rpc/rpc_agent.h"

namespace cohort::parallel {

struct ParameterServerServiceOptions {
  std::chrono::milliseconds probe_interval = std::chrono::milliseconds(500);
  std::chrono::milliseconds probe_timeout = std::chrono::seconds(10);
};

class ParameterServerService {
 public:
  // trainers[i] is the RPC name of worker i (server->options().num_workers of them).
  ParameterServerService(std::shared_ptr<rpc::RpcAgent> agent,
                         std::shared_ptr<ParameterServer> server, std::vector<std::string> trainers,
                         ParameterServerServiceOptions options = {});
  ~ParameterServerService();
  ParameterServerService(const ParameterServerService&) = delete;
  ParameterServerService& operator=(const ParameterServerService&) = delete;

  // Waits until every trainer finished or was lost (false at the deadline);
  // throws the server's failure (kSync with a lost or missing trainer).
  bool wait_done(std::chrono::milliseconds timeout);

  ParameterServer& server() { return *server_; }
  const std::shared_ptr<rpc::RpcAgent>& agent() const { return agent_; }

 private:
  void register_handlers();
  void monitor();
  void probe(const std::vector<int>& workers);

  std::shared_ptr<rpc::RpcAgent> agent_;
  std::shared_ptr<ParameterServer> server_;
  std::vector<std::string> trainers_;
  ParameterServerServiceOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread monitor_;
};

// The shard of server `server` under `assignment`: names and tensors of its
// parameters (handles into `params`, not copies).
nn::NamedTensors shard_of(const nn::NamedTensors& params, const ShardAssignment& assignment,
                          int server);

// The usual set-up of one server of a job: shards `model`'s parameters over
// servers.size() servers (assign_shards), builds the ParameterServer of
// servers[server_index] from its shard (names: servers[i] for the server,
// trainers for its workers; options.num_workers = trainers.size()) and serves
// it on `agent`. Every process builds the model from the same seed, so every
// server starts from the same weights the trainers have.
std::unique_ptr<ParameterServerService> serve_parameter_server(
    std::shared_ptr<rpc::RpcAgent> agent, const nn::Module& model,
    const std::vector<std::string>& servers, const std::vector<std::string>& trainers,
    int server_index, const OptimizerFactory& make_optimizer, ParameterServerOptions options,
    ParameterServerServiceOptions service_options = {});

}  // namespace cohort::parallel
