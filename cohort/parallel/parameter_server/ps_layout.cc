#include "cohort/parallel/parameter_server/ps_layout.h"

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::parallel {

namespace {

int index_of(const std::vector<std::string>& list, const std::string& name) {
  auto it = std::find(list.begin(), list.end(), name);
  return it == list.end() ? -1 : static_cast<int>(it - list.begin());
}

}  // namespace

int PsLayout::server_index(const std::string& name) const { return index_of(servers, name); }
int PsLayout::trainer_index(const std::string& name) const { return index_of(trainers, name); }

PsLayout first_ranks_serve(const std::vector<std::string>& names_by_rank, int num_servers) {
  COHORT_CHECK(num_servers >= 1 && static_cast<size_t>(num_servers) < names_by_rank.size(),
               "parameter server layout: {} servers among {} workers (need at least one server "
               "and one trainer)",
               num_servers, names_by_rank.size());
  PsLayout l;
  l.servers.assign(names_by_rank.begin(), names_by_rank.begin() + num_servers);
  l.trainers.assign(names_by_rank.begin() + num_servers, names_by_rank.end());
  return l;
}

PsLayout colocated_layout(const std::vector<std::string>& names_by_rank) {
  COHORT_CHECK(!names_by_rank.empty(), "parameter server layout: no workers");
  return {names_by_rank, names_by_rank};
}

std::vector<std::string> worker_names(const rpc::RpcAgent& agent) {
  std::vector<std::string> out;
  for (int r = 0; r < agent.world_size(); ++r) out.push_back(agent.worker_name(r));
  return out;
}

int ps_handler_threads(int trainers) { return std::max(4, trainers + 2); }

}  // namespace cohort::parallel
