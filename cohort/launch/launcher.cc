#include "cohort/launch/launcher.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/unique_fd.h"
#include "cohort/launch/cpu_split.h"
#include "cohort/launch/job_coordinator.h"
#include "cohort/launch/line_prefixer.h"
#include "cohort/launch/orphan_guard.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/network.h"
#include "cohort/transport/socket.h"

namespace cohort::launch {
namespace {

void validate(const LaunchOptions& o) {
  COHORT_CHECK(!o.argv.empty(), "cohort run: no program given (cohort run [options] -- PROGRAM)");
  COHORT_CHECK(o.nproc_per_node >= 1, "cohort run: --nproc-per-node must be >= 1, got {}",
               o.nproc_per_node);
  COHORT_CHECK(o.nnodes >= 1, "cohort run: --nnodes must be >= 1, got {}", o.nnodes);
  COHORT_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes,
               "cohort run: --node-rank must be in [0, {}), got {}", o.nnodes, o.node_rank);
  COHORT_CHECK(o.master_port >= 0 && o.master_port <= 65535,
               "cohort run: --master-port must be in 0..65535, got {}", o.master_port);
  COHORT_CHECK(o.max_restarts >= 0, "cohort run: --max-restarts must be >= 0, got {}",
               o.max_restarts);
  COHORT_CHECK(o.max_lost_workers >= 0 && o.max_lost_workers < o.nproc_per_node,
               "cohort run: --max-lost-workers must be in [0, --nproc-per-node = {}), got {}",
               o.nproc_per_node, o.max_lost_workers);
  COHORT_CHECK(!o.fault_tolerant || (o.max_restarts == 0 && o.max_lost_workers == 0),
               "cohort run: --fault-tolerant restarts a failed worker in place while the others "
               "go on (--max-worker-restarts); --max-restarts and --max-lost-workers do not "
               "combine with it");
  COHORT_CHECK(o.max_worker_restarts >= 0, "cohort run: --max-worker-restarts must be >= 0, got {}",
               o.max_worker_restarts);
  COHORT_CHECK(o.replica_size == 1 || o.fault_tolerant,
               "cohort run: --replica-size {} (workers that fail and restart as one replica) "
               "needs --fault-tolerant",
               o.replica_size);
  COHORT_CHECK(o.replica_size >= 1 && o.nproc_per_node % o.replica_size == 0,
               "cohort run: --replica-size {} must divide --nproc-per-node {} (a replica's "
               "workers are on one node)",
               o.replica_size, o.nproc_per_node);
  COHORT_CHECK(o.min_nnodes == 0 || o.fault_tolerant,
               "cohort run: --nnodes {}:{} (nodes joining and leaving a running job) needs "
               "--fault-tolerant",
               o.min_nnodes, o.nnodes);
  COHORT_CHECK(o.min_nnodes >= 0 && o.min_nnodes <= o.nnodes,
               "cohort run: --nnodes MIN:MAX needs 1 <= MIN <= MAX, got {}:{}", o.min_nnodes,
               o.nnodes);
  COHORT_CHECK(o.nnodes == 1 || o.master_port != 0,
               "cohort run: a job of {} nodes needs --master-port (the same on every node)",
               o.nnodes);
  COHORT_CHECK(!o.master_addr.empty(), "cohort run: --master-addr must not be empty");
}

// What this node tells the others when it joins: enough to find it.
std::string this_address(const LaunchOptions& o, int port) {
  try {
    return o.interface.empty()
               ? transport::route_address(o.master_addr, static_cast<uint16_t>(port))
               : transport::interface_address(o.interface);
  } catch (const Error& e) {
    return "?";  // the workers will say why when they look for it
  }
}

std::string about_this_node(const LaunchOptions& o, int port) {
  return fmt::format("host {} address {} pid {} workers {}", transport::host_name(),
                     this_address(o, port), ::getpid(), o.nproc_per_node);
}

// Says goodbye on the launcher links when launch() returns (not when it
// throws: to the other nodes, that launcher died).
struct LeaveOnReturn {
  std::unique_ptr<JobCoordinator>& coord;
  ~LeaveOnReturn() {
    if (coord && std::uncaught_exceptions() == 0) coord->leave();
  }
};

}  // namespace

std::vector<std::pair<std::string, std::string>> worker_env(const LaunchOptions& o, int local_rank,
                                                            int master_port,
                                                            const std::string& token,
                                                            int restart_count, int num_threads) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(o.node_rank * o.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE",
       std::to_string((o.min_nnodes > 0 ? o.min_nnodes : o.nnodes) * o.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {rendezvous::kTokenEnv, token},
      {rendezvous::kStoreHostedEnv, o.host_store ? "1" : "0"},
      {rendezvous::kRestartCountEnv, std::to_string(restart_count)},
  };
  if (o.min_nnodes > 0 && o.node_rank >= o.min_nnodes)
    env.emplace_back("COHORT_FT_REPLACEMENT", "1");
  if (o.replica_size > 1)
    env.emplace_back("COHORT_FT_REPLICA_SIZE", std::to_string(o.replica_size));
  if (!o.interface.empty()) env.emplace_back("COHORT_SOCKET_IFNAME", o.interface);
  if (o.worker_connect_timeout_s > 0)
    env.emplace_back("COHORT_CONNECT_TIMEOUT", std::to_string(o.worker_connect_timeout_s));
  if (num_threads > 0) {
    for (const char* name : {"COHORT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      env.emplace_back(name, std::to_string(num_threads));
    }
  }
  for (const auto& kv : o.extra_env) env.push_back(kv);
  return env;
}

LaunchResult launch(const LaunchOptions& o) {
  validate(o);
  // Forked first, while this is the only thread. It ends with launch() (its
  // destructor says goodbye and reaps it), or, if this process is killed, a
  // moment later, once it has killed the workers' process groups.
  OrphanGuard orphan_guard;
  auto report = fd_sink(o.stderr_fd);
  // A misspelt --interface fails here, naming the interfaces there are,
  // rather than in every worker after the job started.
  if (!o.interface.empty()) (void)transport::interface_address(o.interface);

  std::string token = o.token;
  if (token.empty()) {
    COHORT_CHECK(o.nnodes == 1,
                 "cohort run: a job of {} nodes needs COHORT_TOKEN set to the same secret on "
                 "every node",
                 o.nnodes);
    token = rendezvous::generate_token();
  }

  LaunchResult result;
  // A SIGINT/SIGTERM that came while the launcher waited for other nodes.
  int interrupted_while_waiting = 0;
  auto job_error = [&](const Error& e) {
    report(fmt::format("cohort run: job failed: {}\n", e.what()));
    result.exit_code = 1;
    if (interrupted_while_waiting) {
      result.interrupted_by = interrupted_while_waiting;
      result.exit_code = 128 + interrupted_while_waiting;
    }
    return result;
  };

  std::optional<SignalWatcher> signals;
  std::unique_ptr<JobCoordinator> coord;
  LeaveOnReturn leave_on_return{coord};
  // An elastic job's nodes come and go on their own (see min_nnodes), and so
  // do a fault-tolerant job's: its replicas agree on who takes part through
  // the quorum service, so a lost node must not end the others' run.
  const bool coordinated =
      o.nnodes > 1 && o.host_store && o.min_nnodes == 0 && !o.fault_tolerant;
  auto connect_coordinator = [&](int port) {
    JobCoordinatorOptions co;
    co.master_addr = o.master_addr;
    co.master_port = port;
    co.token = token;
    co.nnodes = o.nnodes;
    co.node_rank = o.node_rank;
    co.connect_timeout = o.connect_timeout;
    co.join_timeout = o.join_timeout;
    co.report_interval = o.report_interval;
    co.report = report;
    co.link_bind_host = "";
    co.host = transport::host_name();
    co.address = this_address(o, port);
    co.interrupted = [&signals, &interrupted_while_waiting] {
      if (!signals) return 0;
      for (int sig : signals->take()) {
        if ((sig == SIGINT || sig == SIGTERM) && !interrupted_while_waiting)
          interrupted_while_waiting = sig;
      }
      return interrupted_while_waiting;
    };
    try {
      coord = std::make_unique<JobCoordinator>(co);
    } catch (const Error& e) {
      job_error(e);
      return false;
    }
    return true;
  };
  // Other nodes reach node 0's store before blocking signals: nothing has
  // started yet, so Ctrl-C during a long connect simply ends the launcher.
  if (coordinated && o.node_rank != 0 && !connect_coordinator(o.master_port)) return result;

  // Signals are blocked before the store thread starts, so it inherits the block.
  signals.emplace(std::initializer_list<int>{SIGINT, SIGTERM, SIGCHLD});

  std::unique_ptr<rendezvous::TcpStoreServer> server;
  int port = o.master_port;
  if (o.node_rank == 0 && o.host_store) {
    rendezvous::TcpStoreServerOptions so;
    so.bind_host = o.nnodes == 1 ? transport::bind_host_for(o.master_addr) : "";
    so.port = static_cast<uint16_t>(o.master_port);
    so.token = token;
    server = std::make_unique<rendezvous::TcpStoreServer>(so);
    port = server->port();
  } else if (port == 0) {
    // Not hosting: reserve-and-release a free port for rank 0 to serve on.
    uint16_t picked = 0;
    UniqueFd probe = transport::listen_tcp("127.0.0.1", 0, &picked);
    port = picked;
  }
  if (coordinated && o.node_rank == 0 && !connect_coordinator(port)) return result;

  std::vector<std::vector<int>> shares;
  if (o.pin) shares = split_cpus(allowed_cpus(), o.nproc_per_node);

  for (int attempt = 0;; ++attempt) {
    if (coord) {
      try {
        coord->join(attempt, about_this_node(o, port));
      } catch (const Error& e) {
        result.restarts = attempt;
        if (interrupted_while_waiting) coord->announce_stop(attempt, e.what());
        return job_error(e);
      }
    }
    std::vector<WorkerSpec> specs;
    for (int local = 0; local < o.nproc_per_node; ++local) {
      WorkerSpec s;
      s.local_rank = local;
      s.rank = o.node_rank * o.nproc_per_node + local;
      s.child.argv = o.argv;
      int threads = o.pin ? static_cast<int>(shares[static_cast<size_t>(local)].size()) : 0;
      s.child.env = environment_with(worker_env(o, local, port, token, attempt, threads));
      if (o.pin) s.child.cpus = shares[static_cast<size_t>(local)];
      specs.push_back(std::move(s));
    }
    WorkerGroupOptions go;
    go.grace = o.grace;
    go.prefix_output = o.prefix_output;
    go.stdout_fd = o.stdout_fd;
    go.stderr_fd = o.stderr_fd;
    go.max_lost_workers = o.max_lost_workers;
    go.max_worker_restarts = o.fault_tolerant ? o.max_worker_restarts : -1;
    go.replica_size = o.replica_size;
    go.orphan_guard = &orphan_guard;
    if (coord) {
      coord->start_watch(attempt);
      go.external_stop = [&coord] { return coord->failure(); };
      go.external_stop_fd = coord->lost_fd();
      go.on_interrupt = [&coord, &o, attempt](int sig) {
        const char* name = ::sigabbrev_np(sig);
        coord->announce_stop(attempt, fmt::format("node {}'s cohort run was stopped by SIG{}",
                                                  o.node_rank, name ? name : "?"));
      };
    }
    AttemptResult a = WorkerGroup(std::move(specs), go).run(*signals);
    if (coord) coord->stop_watch();
    result.failure = a.failure;
    result.lost = a.lost;
    result.interrupted_by = a.interrupted_by;
    result.restarts = attempt;
    if (a.interrupted_by) {
      result.exit_code = 128 + a.interrupted_by;
      report(fmt::format("cohort run: stopped by signal {}\n", a.interrupted_by));
      return result;
    }
    // What ended the attempt for the whole job: this node's failure (recorded
    // for the others unless one came first), another node's, the store's
    // loss, or, once this node's workers all succeeded, a failure elsewhere
    // in the same attempt (its exit barrier watches for one).
    std::optional<std::string> job_failure;
    // A launcher lost anywhere is the first cause: this node's workers
    // that exited with an error lost their peers with it.
    std::optional<std::string> lost = coord ? coord->launcher_lost() : std::nullopt;
    if (a.failure && lost && a.failure->status.signal == 0) {
      job_failure = lost;
    } else if (a.failure) {
      const WorkerFailure& f = *a.failure;
      job_failure = fmt::format("rank {} (local rank {} on node {}, pid {}) {}", f.rank,
                                f.local_rank, o.node_rank, f.pid, f.status.describe());
      if (coord) job_failure = coord->report_failure(attempt, *job_failure, f.status.signal != 0);
    } else if (lost) {
      job_failure = lost;
    } else if (!a.stopped_by.empty()) {
      job_failure = a.stopped_by;
    } else if (coord) {
      try {
        job_failure = coord->finish(attempt, /*watch_failure=*/true, o.exit_barrier_timeout);
      } catch (const TimeoutError& e) {
        // As torchrun's exit barrier: this node's workers succeeded; the
        // nodes still running decide their own outcome.
        report(fmt::format("cohort run: {}\n", e.what()));
      } catch (const Error& e) {
        if (interrupted_while_waiting) {
          coord->announce_stop(attempt, e.what());
          return job_error(e);
        }
        job_failure = e.what();
      }
    }
    if (!job_failure) {
      result.exit_code = 0;
      if (!a.lost.empty()) {
        std::string ranks;
        for (const WorkerFailure& f : a.lost) {
          ranks +=
              fmt::format("{}rank {} ({})", ranks.empty() ? "" : ", ", f.rank, f.status.describe());
        }
        report(fmt::format("cohort run: job finished without {} lost worker{}: {}\n", a.lost.size(),
                           a.lost.size() == 1 ? "" : "s", ranks));
      }
      return result;
    }
    if (!lost && coord) lost = coord->launcher_lost();
    const bool store_lost = job_failure->find("lost the job's store") != std::string::npos ||
                            (coord && coord->store_gone());
    // A lost launcher cannot come back, so the job ends on every node.
    if (lost && !store_lost) coord->announce_lost(attempt, *job_failure);
    // A launcher that was interrupted or lost ends the job on every node.
    const bool stopped = coord && !store_lost && coord->job_stopped();
    if (attempt < o.max_restarts && !store_lost && !stopped && !lost) {
      report(fmt::format("cohort run: restarting the {} (restart {} of {}) after: {}\n",
                         coord ? "job on every node" : "group", attempt + 1, o.max_restarts,
                         *job_failure));
      continue;
    }
    result.exit_code = 1;
    if (a.failure && a.failure->status.shell_code() != 0)
      result.exit_code = a.failure->status.shell_code();
    report(fmt::format("cohort run: job failed: {}{}\n", *job_failure,
                       attempt > 0
                           ? fmt::format(" (after {} restart{})", attempt, attempt > 1 ? "s" : "")
                           : std::string()));
    if (coord && !store_lost) {
      // The others are stopping too, or cannot be reached (a cut link): wait briefly.
      try {
        coord->finish(
            attempt, /*watch_failure=*/false,
            std::min<std::chrono::milliseconds>(o.exit_barrier_timeout, std::chrono::seconds(10)));
      } catch (const Error& e) {
        report(fmt::format("cohort run: node {}: exit barrier with the other nodes failed: {}\n",
                           o.node_rank, e.what()));
      }
    }
    return result;
  }
}

}  // namespace cohort::launch
