// PsLayout: who serves and who trains in a parameter-server job, by RPC
// worker name. The servers' order is the shard order (server i holds shard i
// of assign_shards), and every process must pass the same lists.
//
//   // cohort train --strategy ps --ps-servers S: the first S ranks serve.
//   PsLayout layout = first_ranks_serve(names_by_rank, S);
//   if (layout.server_index(rank) >= 0) ... serve_parameter_server(...)
//   if (layout.trainer_index(rank) >= 0) ... ParameterServerClient(...)
//
// colocated(names): every process serves one shard and trains (S = W).
// Thread safety: a plain value.
#pragma once

#include <string>
#include <vector>

#include "cohort/rpc/rpc_agent.h"

namespace cohort::parallel {

struct PsLayout {
  std::vector<std::string> servers;
  std::vector<std::string> trainers;

  // The index of `name` among the servers / trainers, or -1.
  int server_index(const std::string& name) const;
  int trainer_index(const std::string& name) const;
};

// Ranks 0..num_servers-1 serve, the others train (InvalidArgument unless
// 1 <= num_servers < names.size()).
PsLayout first_ranks_serve(const std::vector<std::string>& names_by_rank, int num_servers);
// Every worker serves and trains.
PsLayout colocated_layout(const std::vector<std::string>& names_by_rank);
// The agent's workers by rank (agent.worker_name(r) for r < world_size).
std::vector<std::string> worker_names(const rpc::RpcAgent& agent);

// RpcOptions::num_handler_threads a server of `trainers` trainers needs:
// one per trainer that may wait in a pull, plus room for pushes and probes
// (ParameterServerService checks it).
int ps_handler_threads(int trainers);

}  // namespace cohort::parallel
