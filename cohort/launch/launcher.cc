#include "cohort/launch/launcher.h"

#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/unique_fd.h"
#include "cohort/launch/cpu_split.h"
#include "cohort/launch/job_coordinator.h"
#include "cohort/launch/line_prefixer.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/rendezvous/socket.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/rendezvous/token.h"
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
  COHORT_CHECK(o.nnodes == 1 || o.master_port != 0,
               "cohort run: a job of {} nodes needs --master-port (the same on every node)",
               o.nnodes);
  COHORT_CHECK(!o.master_addr.empty(), "cohort run: --master-addr must not be empty");
}

// Waits until every node's launcher has finished its workers; failures here
// are reported, not thrown: the job's outcome is already decided.
// After a failure the others are stopping too, or cannot be reached (a cut
// link): the barrier then waits only briefly.
void exit_barrier(const LaunchOptions& o, int port, const std::string& token,
                  const std::function<void(std::string_view)>& report, bool failed = false) {
  if (o.nnodes == 1 || !o.host_store) return;
  const std::chrono::milliseconds limit =
      failed ? std::min<std::chrono::milliseconds>(o.exit_barrier_timeout, std::chrono::seconds(10))
             : o.exit_barrier_timeout;
  try {
    rendezvous::TcpStoreOptions so;
    so.host = o.master_addr;
    so.port = static_cast<uint16_t>(port);
    so.token = token;
    so.timeout = limit;
    rendezvous::TcpStore store(so);
    const std::string key = "__cohort_launcher/exit";
    if (store.add(key, 1) == o.nnodes) store.set(key + "/done", std::string("1"));
    store.wait({key + "/done"}, limit);
    // Node 0 serves the store: it leaves last, once every node has seen "done".
    if (store.add(key + "/left", 1) < o.nnodes && o.node_rank == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (store.add(key + "/left", 0) < o.nnodes && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const Error& e) {
    report(fmt::format("cohort run: node {}: exit barrier with the other nodes failed: {}\n",
                       o.node_rank, e.what()));
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> worker_env(const LaunchOptions& o, int local_rank,
                                                            int master_port,
                                                            const std::string& token,
                                                            int restart_count, int num_threads) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", std::to_string(o.node_rank * o.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {rendezvous::kTokenEnv, token},
      {rendezvous::kStoreHostedEnv, o.host_store ? "1" : "0"},
      {rendezvous::kRestartCountEnv, std::to_string(restart_count)},
  };
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
  auto report = fd_sink(o.stderr_fd);

  std::string token;
  if (const char* env = std::getenv(rendezvous::kTokenEnv); env && *env) {
    token = env;
  } else {
    COHORT_CHECK(o.nnodes == 1,
                 "cohort run: a job of {} nodes needs COHORT_TOKEN set to the same secret on "
                 "every node",
                 o.nnodes);
    token = rendezvous::generate_token();
  }

  // Signals are blocked before the store thread starts, so it inherits the block.
  SignalWatcher signals({SIGINT, SIGTERM, SIGCHLD});

  std::unique_ptr<rendezvous::TcpStoreServer> server;
  int port = o.master_port;
  if (o.node_rank == 0 && o.host_store) {
    rendezvous::TcpStoreServerOptions so;
    so.bind_host =
        o.nnodes == 1 && rendezvous::net::is_loopback(o.master_addr) ? "127.0.0.1" : "0.0.0.0";
    so.port = static_cast<uint16_t>(o.master_port);
    so.token = token;
    server = std::make_unique<rendezvous::TcpStoreServer>(so);
    port = server->port();
  } else if (port == 0) {
    // Not hosting: reserve-and-release a free port for rank 0 to serve on.
    uint16_t picked = 0;
    UniqueFd probe = rendezvous::net::listen_tcp("127.0.0.1", 0, &picked);
    port = picked;
  }

  std::vector<std::vector<int>> shares;
  if (o.pin) shares = split_cpus(allowed_cpus(), o.nproc_per_node);

  std::unique_ptr<JobCoordinator> coord;
  if (o.nnodes > 1 && o.host_store) {
    JobCoordinatorOptions co;
    co.master_addr = o.master_addr;
    co.master_port = port;
    co.token = token;
    co.nnodes = o.nnodes;
    co.node_rank = o.node_rank;
    co.connect_timeout = o.connect_timeout;
    co.join_timeout = o.join_timeout;
    co.report_interval = o.report_interval;
    coord = std::make_unique<JobCoordinator>(co);
  }

  LaunchResult result;
  for (int attempt = 0;; ++attempt) {
    if (coord) {
      coord->join(attempt, fmt::format("{} pid {} ({} workers)", transport::host_name(), ::getpid(),
                                       o.nproc_per_node));
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
    if (coord) {
      coord->start_watch(attempt);
      go.external_stop = [&coord] { return coord->failure(); };
    }
    AttemptResult a = WorkerGroup(std::move(specs), go).run(signals);
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
    // for the others unless one came first), another node's, or the store's loss.
    std::optional<std::string> job_failure;
    if (a.failure) {
      const WorkerFailure& f = *a.failure;
      job_failure = fmt::format("rank {} (local rank {} on node {}, pid {}) {}", f.rank,
                                f.local_rank, o.node_rank, f.pid, f.status.describe());
      if (coord) job_failure = coord->report_failure(attempt, *job_failure, f.status.signal != 0);
    } else if (!a.stopped_by.empty()) {
      job_failure = a.stopped_by;
    } else if (coord) {
      job_failure = coord->recorded_failure(attempt);  // a node that failed as ours finished
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
      exit_barrier(o, port, token, report);
      return result;
    }
    const bool store_lost = job_failure->rfind("lost ", 0) == 0;
    if (attempt < o.max_restarts && !store_lost) {
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
    if (!store_lost) exit_barrier(o, port, token, report, /*failed=*/true);
    return result;
  }
}

}  // namespace cohort::launch
