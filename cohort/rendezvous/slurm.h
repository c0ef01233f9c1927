// Slurm's description of a job step, parsed: what env:// bootstrap (and the
// CLI's thread count) derive from the variables srun sets in every task when
// the job itself sets nothing (docs/slurm.md).
//
//   SLURM_STEP_NODELIST   a compressed host list, "node[01-04,07],gpu3": the
//                         first host is where srun starts task 0 (block and
//                         cyclic distributions), so it is MASTER_ADDR;
//   SLURM_JOB_ID          the job's id: MASTER_PORT = port_for_job(id);
//   SLURM_STEP_TASKS_PER_NODE, SLURM_NODEID
//                         "2(x3),1" and this node's index: the tasks on this
//                         node (LOCAL_WORLD_SIZE).
//
// Pure functions of their arguments (the environment is read by the callers,
// at the edge); no state, safe from any thread. A malformed list is an
// InvalidArgument naming the list, the position and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::rendezvous::slurm {

// The first host of a Slurm host list, after checking the whole list:
// "node[01-04,07],gpu3" -> "node01", "rack[2-3]-n[5-6]" -> "rack2-n5",
// "localhost" -> "localhost". Ranges keep the zero padding of their lower
// bound ("n[08-11]" -> "n08").
std::string first_host(std::string_view hostlist);

// Every host of the list, in Slurm's order (each entry in turn, bracket
// groups as a product, the last group varying fastest). Throws
// InvalidArgument when the list names more than max_hosts hosts.
std::vector<std::string> expand_hostlist(std::string_view hostlist, size_t max_hosts = 65536);

// The tasks on node node_id (0-based) of a tasks-per-node list as Slurm
// writes it: "2(x3),1" is 2 tasks on each of nodes 0-2 and 1 on node 3.
int tasks_on_node(std::string_view tasks_per_node, int node_id);

// The port rank 0 serves the store on when MASTER_PORT is unset: 10000 +
// job_id % 50000, so in 10000..59999, the same on every node of the job and
// different for consecutive jobs (as PyTorch Lightning and others derive it).
uint16_t port_for_job(int64_t job_id);

}  // namespace cohort::rendezvous::slurm
