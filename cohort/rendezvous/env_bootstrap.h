// Bootstrap: turns an init method into this process's place in the job (rank,
// world size, local rank) and a connected Store, as PyTorch's
// init_process_group does. Init methods:
//
//   env://            MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
//                     LOCAL_WORLD_SIZE as torchrun and `cohort run` set them;
//                     when RANK/WORLD_SIZE/LOCAL_RANK are unset, OpenMPI's
//                     OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, then,
//                     inside a Slurm job step (SLURM_STEP_ID set, i.e. under
//                     srun), SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and the
//                     step's tasks on this node. When MASTER_ADDR is unset:
//                     the first host of SLURM_STEP_NODELIST (else
//                     SLURM_JOB_NODELIST); when MASTER_PORT is unset: 10000 +
//                     SLURM_JOB_ID % 50000 (rendezvous/slurm.h, docs/slurm.md).
//   tcp://host:port   rank and world size from options or the URL query
//                     (?rank=R&world_size=W), else from the variables above.
//   file:///path      a FileStore at /path; rank and world size as for tcp://.
//
// Who serves the TcpStore: when COHORT_STORE_HOSTED=1 (set by `cohort run`
// and cohort::spawn, which host the store themselves), every rank connects as
// a client; otherwise rank 0 serves it on MASTER_PORT (and must outlive the
// others' use of it). The token comes from options.token or COHORT_TOKEN.
// When COHORT_RESTART_COUNT is set, the store returned is a PrefixStore
// "attempt<N>/", so a restarted group never sees the keys of an earlier try.
//
// Errors: InvalidArgument naming the missing or malformed variable or URL
// part (a Slurm node list with the position of the fault), or rank 0 running
// on another node than the one its address was derived from
// (SLURMD_NODENAME); TimeoutError when the store cannot be reached in time.
//
// The network options of the result: see BootstrapResult::network.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/rendezvous/store.h"
#include "cohort/transport/network.h"

namespace cohort::rendezvous {

inline constexpr const char* kStoreHostedEnv = "COHORT_STORE_HOSTED";
inline constexpr const char* kRestartCountEnv = "COHORT_RESTART_COUNT";

struct BootstrapOptions {
  int rank = -1;        // -1: from the URL query or the environment
  int world_size = -1;  // -1: from the URL query or the environment
  Duration timeout = kDefaultStoreTimeout;
  std::optional<std::string> token;  // nullopt: COHORT_TOKEN
  // Environment variables a layer above takes its options from (the
  // collectives' COHORT_TRANSPORT, COHORT_<OP>_ALGO, ...: collectives/knobs.h),
  // read here, at the edge, into BootstrapResult::knobs.
  std::vector<std::string> knobs;
};

struct BootstrapResult {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes on this host
  int local_world_size = 1;  // processes on this host
  std::string master_addr;   // tcp/env: the store's host
  uint16_t master_port = 0;  // tcp/env: the store's port
  std::shared_ptr<Store> store;
  // What the transport advertises and how long it waits (transport/network.h):
  // master_addr/port from above; address, interface and connect_timeout from
  // COHORT_ADDR, COHORT_SOCKET_IFNAME and COHORT_CONNECT_TIMEOUT (seconds),
  // read here, at the edge.
  transport::NetworkOptions network;
  // COHORT_FLIGHT_RECORDER_DIR: where each rank dumps its collectives' flight
  // record when an op fails ("" = nowhere; collectives/flight_recorder.h).
  std::string flight_recorder_dir;
  // The values of BootstrapOptions::knobs that are set and not empty, by
  // name; the layer that asked validates them.
  std::map<std::string, std::string> knobs;
};

// The world size the environment announces, as bootstrap reads it: WORLD_SIZE,
// else OMPI_COMM_WORLD_SIZE, else SLURM_NTASKS inside a Slurm job step
// (SLURM_STEP_ID set); nullopt when none is. Throws InvalidArgument naming a
// variable that is not a non-negative integer.
std::optional<int> env_world_size();

// The CPUs of this task of a Slurm job step (srun sets SLURM_STEP_ID), for its
// intra-op threads: SLURM_CPUS_PER_TASK (srun -c), else this node's CPUs of the
// job (SLURM_CPUS_ON_NODE) split over the step's tasks on this node, as `cohort
// run` splits its host's CPUs. nullopt outside a step or when Slurm says
// neither; throws InvalidArgument naming a malformed variable.
std::optional<int> slurm_task_cpus();

// Parses init_method, connects (or serves) the store, and returns the result.
BootstrapResult bootstrap(const std::string& init_method, const BootstrapOptions& options = {});

// The parts of an init method URL (exposed for tests and the launcher).
struct InitMethod {
  std::string scheme;   // "env", "tcp" or "file"
  std::string host;     // tcp
  uint16_t port = 0;    // tcp
  std::string path;     // file
  int rank = -1;        // from ?rank=
  int world_size = -1;  // from ?world_size=
};
InitMethod parse_init_method(const std::string& init_method);

}  // namespace cohort::rendezvous
