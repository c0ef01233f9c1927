// launch(): runs a program as the workers of a distributed job on this node,
// like torchrun; the engine of `cohort run`.
//
// Each worker gets RANK (= node_rank * nproc_per_node + local_rank),
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (the node rank),
// MASTER_ADDR, MASTER_PORT, COHORT_TOKEN (the job's store token),
// COHORT_STORE_HOSTED, COHORT_RESTART_COUNT, and unless pinning is off its CPU
// share: pinned with sched_setaffinity, with COHORT_NUM_THREADS,
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to the share's size.
//
// The store: node 0 hosts a TcpStoreServer on MASTER_PORT for the whole job
// (restarts included; a restarted group uses fresh keys under
// "attempt<N>/", see env_bootstrap.h) and workers on every node connect to
// it as clients. MASTER_PORT 0 on a one-node job: a free port is picked.
// The token is options.token when set (`cohort run` passes COHORT_TOKEN from
// its environment), else a fresh random one (a multi-node job needs the same
// token on every node).
//
// Failure: the first max_lost_workers failures are reported and tolerated
// (the others go on). When a worker fails beyond that, the others get SIGTERM and, after the grace
// period, SIGKILL; the group restarts while restarts remain, else launch()
// returns a non-zero exit code and prints a summary naming the failed rank and
// its exit code or signal. SIGINT/SIGTERM to the launcher are forwarded to the
// workers (a second one kills them) and end the job without restart.
//
// Multi-node (cohort/launch/job_coordinator.h): the nodes' launchers join
// through the store before each attempt (every waiting node says which nodes
// it still waits for, and fails after join_timeout naming them; a node that
// cannot reach the store fails after connect_timeout naming it). A failure of
// any worker on any node is written to the store; every node then stops its
// workers, and with restarts left the whole job restarts together (every
// worker sees the same COHORT_RESTART_COUNT); when they are spent every node
// exits non-zero naming the failed rank and node. A node whose workers all
// ended well waits at the attempt's exit barrier and still joins a restart
// (or the failure) when a worker elsewhere fails later. Losing node 0's store
// stops this node's workers and fails the job; an interrupted launcher
// (SIGINT/SIGTERM) ends the job on every node without restart. A launcher
// that dies (any signal) or falls silent is seen at once by its peers over
// the launchers' link (launcher_link.h): they stop their workers and fail,
// naming it ("node 1's launcher (pid P on host H, address A) died: ..."),
// without restart; its own workers die with it (PR_SET_PDEATHSIG), and what
// they started is killed with their process groups (orphan_guard.h). Node 0 leaves
// the exit barrier last, so it does not take the store away while workers
// elsewhere still use it (torchrun's exit barrier).
//
// Thread safety: call from one thread; it blocks SIGINT, SIGTERM and SIGCHLD
// in that thread while it runs (signals reach it through a signalfd).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/launch/worker_group.h"

namespace cohort::launch {

struct LaunchOptions {
  std::vector<std::string> argv;  // the worker program and its arguments
  int nproc_per_node = 1;
  int nnodes = 1;
  // --nnodes MIN:MAX (fault_tolerant only): an elastic job of MIN to nnodes
  // (= MAX) nodes, each started on its own with its --node-rank; no node
  // waits for the others, their workers meet through the quorum service on
  // node 0's store. WORLD_SIZE is MIN x nproc_per_node (the first quorum
  // waits for that many); a node of rank >= MIN joins a running job
  // (COHORT_FT_REPLACEMENT=1: its workers take the state from a live one).
  // A node leaves by SIGTERM to its launcher (the workers leave at a step
  // boundary). 0: not elastic.
  int min_nnodes = 0;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port (one-node jobs only)
  int max_restarts = 0;
  // Workers that may fail without stopping the others (see WorkerGroupOptions);
  // the job then succeeds when every other worker does, and the lost ones are
  // named in the summary.
  int max_lost_workers = 0;
  // Fault-tolerant training (cohort train --fault-tolerant,
  // parallel/fault_tolerance/): a failed worker is started again in its place
  // while the others go on, up to max_worker_restarts times per worker
  // (WorkerGroupOptions::max_worker_restarts); the job succeeds when every
  // worker's last run does (one left without restarts is named as lost).
  // Excludes max_restarts and max_lost_workers. The nodes are not linked
  // (as min_nnodes's): a lost node's replicas are dropped and the others go
  // on, a node started again (same --node-rank) joins the running job; node
  // 0's launcher hosts the store and so the quorum service, whose loss stops
  // every replica (parallel/fault_tolerance/replica_manager.h).
  bool fault_tolerant = false;
  int max_worker_restarts = 3;
  // fault_tolerant: workers per replica (WorkerGroupOptions::replica_size;
  // divides nproc_per_node), told to them as COHORT_FT_REPLICA_SIZE.
  int replica_size = 1;
  bool pin = true;            // split the CPUs between local workers
  bool host_store = true;     // node 0 serves the rendezvous store on MASTER_PORT
  bool prefix_output = true;  // "[rank N] " before every output line
  std::chrono::milliseconds grace = std::chrono::seconds(5);  // SIGTERM -> SIGKILL
  // Multi-node: how long a launcher whose workers ended well waits for the
  // other nodes' (node 0 keeps serving the store while others still use it);
  // after a failure it waits at most 10 s.
  std::chrono::milliseconds exit_barrier_timeout = std::chrono::seconds(300);
  // Multi-node: how long a launcher waits for the other nodes to join (and
  // to come back for a restart), saying every report_interval which are
  // missing; and how long it tries to reach node 0's store (--connect-timeout).
  std::chrono::milliseconds join_timeout = std::chrono::seconds(300);
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(120);
  std::chrono::milliseconds report_interval = std::chrono::seconds(5);
  // Given to the workers as COHORT_SOCKET_IFNAME / COHORT_CONNECT_TIMEOUT
  // (transport/network.h); "" / 0: not set.
  std::string interface;
  int worker_connect_timeout_s = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;  // workers' stderr and the launcher's own messages
  std::vector<std::pair<std::string, std::string>> extra_env;
  // The job's store token (COHORT_TOKEN for the workers); "": a fresh random
  // one, which only a one-node job may use.
  std::string token;
};

struct LaunchResult {
  int exit_code = 0;  // 0 on success; the failed worker's code (128 + signal when killed)
  std::vector<WorkerFailure> lost;       // tolerated failures of the last attempt
  int restarts = 0;                      // restarts performed
  std::optional<WorkerFailure> failure;  // first failure of the last attempt
  int interrupted_by = 0;                // the signal that ended the job, or 0
};

// Runs the job to its end. Throws InvalidArgument for bad options (an unknown
// --interface included) and IoError when a worker cannot be started. A
// multi-node job that cannot join (store unreachable, nodes missing, store
// lost) is a failed job: exit_code 1 and a "cohort run: job failed: ..." line.
LaunchResult launch(const LaunchOptions& options);

// The environment variables launch() gives the worker with this local rank
// (store address and token already decided); exposed for spawn() and tests.
std::vector<std::pair<std::string, std::string>> worker_env(const LaunchOptions& options,
                                                            int local_rank, int master_port,
                                                            const std::string& token,
                                                            int restart_count, int num_threads);

}  // namespace cohort::launch
