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
// The first bootstrap also applies the process settings of the environment
// (COHORT_LOG_LEVEL, COHORT_NUM_THREADS, COHORT_STORAGE_CACHE: see
// apply_env_settings) unless the program applied them itself.
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

#include "cohort/base/log.h"
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
  // COHORT_ADDR, COHORT_SOCKET_IFNAME and COHORT_CONNECT_TIMEOUT (seconds);
  // shm_ring_bytes and shm_single_copy from COHORT_SHM_RING_BYTES (a power of
  // two >= 4096) and COHORT_SHM_SINGLE_COPY (0 or 1); read here, at the edge.
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

// Whether this process runs under OpenMPI's mpirun (OMPI_COMM_WORLD_SIZE set)
// without MASTER_ADDR exported: where train's backend "auto" picks mpi.
bool env_mpirun_without_master();

// The process-wide settings the environment gives a program, read and checked
// here, at the edge (docs/configuration.md); nullopt where a variable is unset
// or empty. Throws InvalidArgument naming a malformed variable and what it takes.
struct EnvSettings {
  std::optional<LogLevel> log_level;  // COHORT_LOG_LEVEL: error|warn|info|debug
  std::optional<int> num_threads;     // COHORT_NUM_THREADS: > 0, the default thread budget
  std::optional<bool> storage_cache;  // COHORT_STORAGE_CACHE: 0 (off) or 1 (on)
  // COHORT_DEVICE_TIMEOUT_S: > 0, the time-out of host waits on GPU work
  // (RuntimeOptions::device_wait_timeout_s).
  std::optional<double> device_timeout_s;
  // COHORT_CUDNN_ATTENTION: 0 (cohort's own attention kernel) or 1 (cuDNN's
  // where it takes the shape; RuntimeOptions::cudnn_attention).
  std::optional<bool> cudnn_attention;
};
EnvSettings read_env_settings();

// Applies the settings that are set: the log level (set_log_level), the
// default thread budget, the storage cache and the device wait time-out
// (Runtime::configure); the rest
// stays as it is. The first bootstrap() of a process applies
// read_env_settings() unless the program called this before: a program that
// wants the environment's settings from its first line, or none of them (an
// empty EnvSettings), calls it itself, as the cohort CLI does at start.
void apply_env_settings(const EnvSettings& settings);

// What the environment says of a group beyond its store: the network, flight
// recorder and knob fields of BootstrapResult (COHORT_ADDR, ..., see there),
// read and checked as bootstrap() reads them. For a program whose store comes
// from elsewhere (the PyTorch backend gets PyTorch's); bootstrap() uses it too.
struct GroupEnvSettings {
  transport::NetworkOptions network;  // master_addr/port left empty
  std::string flight_recorder_dir;
  std::map<std::string, std::string> knobs;
};
GroupEnvSettings read_group_env_settings(const std::vector<std::string>& knobs);

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
