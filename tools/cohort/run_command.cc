// `cohort run`: the launcher, like torchrun. Runs PROGRAM as the local
// workers of a distributed job (see cohort/launch/launcher.h for the
// environment each worker gets, the store, restarts and failure handling).
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>

#include "cohort/base/error.h"
#include "cohort/launch/launcher.h"
#include "cohort/rendezvous/token.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

// `cohort run ... -- cohort train` means this very binary, whether or not a
// cohort is on PATH (and never a different build that happens to be).
std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("cohort");
}

struct RunArgs {
  launch::LaunchOptions options;
  bool no_pin = false;
  bool no_prefix = false;
  bool no_host_store = false;
  double grace_s = 5.0;
  int join_timeout_s = 300;
  int connect_timeout_s = 120;
  std::string nnodes = "1";
};

// "N" or "MIN:MAX" into o.nnodes (MAX) and o.min_nnodes (MIN, 0 for "N").
void parse_nnodes(const std::string& text, launch::LaunchOptions& o) {
  const auto bad = [&] {
    return InvalidArgument(fmt::format(
        "cohort run: --nnodes must be N or MIN:MAX (positive integers), got '{}'", text));
  };
  const size_t colon = text.find(':');
  try {
    size_t end = 0;
    if (colon == std::string::npos) {
      o.nnodes = std::stoi(text, &end);
      if (end != text.size()) throw bad();
      return;
    }
    o.min_nnodes = std::stoi(text.substr(0, colon), &end);
    if (end != colon) throw bad();
    const std::string max = text.substr(colon + 1);
    o.nnodes = std::stoi(max, &end);
    if (end != max.size()) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  if (o.min_nnodes < 1) throw bad();
}

std::function<int()> setup_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto& o = args->options;
  app.add_option("--nproc-per-node", o.nproc_per_node, "Workers on this node")
      ->capture_default_str();
  app.add_option("--nnodes", args->nnodes,
                 "Nodes in the job, or MIN:MAX with --fault-tolerant (nodes join and leave the "
                 "running job)")
      ->capture_default_str();
  app.add_option("--node-rank", o.node_rank, "This node's rank in [0, nnodes)")
      ->capture_default_str();
  app.add_option("--master-addr", o.master_addr, "Address of node 0 (the rendezvous store)")
      ->capture_default_str();
  app.add_option("--master-port", o.master_port,
                 "Port of the rendezvous store on node 0 (0: pick a free one, one node only)")
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts,
                 "Restart the whole job (every node together) up to K times after a worker "
                 "fails")
      ->capture_default_str();
  app.add_option("--max-lost-workers", o.max_lost_workers,
                 "Let up to N workers fail without stopping the others (jobs that survive "
                 "losing workers, e.g. --strategy ps --ps-mode async)")
      ->capture_default_str();
  app.add_flag("--fault-tolerant", o.fault_tolerant,
               "Restart a failed worker in place while the others go on (for cohort train "
               "--fault-tolerant, whose replicas drop the lost one and take back its "
               "replacement; docs/fault_tolerance.md)");
  app.add_option("--max-worker-restarts", o.max_worker_restarts,
                 "--fault-tolerant: restarts of each worker; past them it is lost and the others "
                 "go on")
      ->capture_default_str();
  app.add_option("--replica-size", o.replica_size,
                 "--fault-tolerant: workers per replica (consecutive local ranks; divides "
                 "--nproc-per-node), which fail and restart as one (cohort train "
                 "--fault-tolerant --strategy zero shards over them)")
      ->capture_default_str();
  app.add_flag("--no-pin", args->no_pin,
               "Do not pin workers to CPU shares or set their thread counts");
  app.add_flag("--no-prefix", args->no_prefix, "Do not prefix output lines with [rank N]");
  app.add_flag("--no-host-store", args->no_host_store,
               "Do not host the store; rank 0 serves it on MASTER_PORT");
  app.add_option("--interface", o.interface,
                 "Network interface whose address the workers advertise to each other (like "
                 "GLOO_SOCKET_IFNAME; set as COHORT_SOCKET_IFNAME; default: the one on the "
                 "route to --master-addr)");
  app.add_option("--connect-timeout", args->connect_timeout_s,
                 "Seconds this launcher and its workers try to reach the store and their peers "
                 "before failing (the workers get it as COHORT_CONNECT_TIMEOUT)")
      ->capture_default_str();
  app.add_option("--join-timeout", args->join_timeout_s,
                 "Seconds to wait for the other nodes to join (and to come back for a restart) "
                 "before failing, naming the missing ones")
      ->capture_default_str();
  app.add_option("--grace-period", args->grace_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  // Everything from the first argument that is not a launcher option on is
  // the program and its own arguments (as with torchrun); "--" may mark it.
  app.add_option("program", o.argv, "PROGRAM ARGS...")->required()->expected(-1);
  app.positionals_at_end();
  app.footer(
      "Usage: cohort run [OPTIONS] [--] PROGRAM [ARGS...]\nExample: cohort run "
      "--nproc-per-node 2 -- cohort train --model net");
  return [args]() -> int {
    launch::LaunchOptions o = args->options;
    parse_nnodes(args->nnodes, o);
    if (!o.argv.empty() && o.argv.front() == "cohort") o.argv.front() = self_path();
    o.pin = !args->no_pin;
    o.prefix_output = !args->no_prefix;
    o.host_store = !args->no_host_store;
    o.grace = std::chrono::milliseconds(static_cast<int64_t>(args->grace_s * 1000));
    if (args->join_timeout_s <= 0 || args->connect_timeout_s <= 0) {
      throw InvalidArgument(fmt::format(
          "cohort run: --join-timeout and --connect-timeout must be positive, got {} and {}",
          args->join_timeout_s, args->connect_timeout_s));
    }
    o.join_timeout = std::chrono::seconds(args->join_timeout_s);
    o.connect_timeout = std::chrono::seconds(args->connect_timeout_s);
    o.worker_connect_timeout_s = args->connect_timeout_s;
    // The job's token is configuration: read here, at the edge (launch() makes
    // a fresh one for a one-node job when it is unset).
    if (const char* token = std::getenv(rendezvous::kTokenEnv)) o.token = token;
    // A closed terminal or pipe on our output must not kill the launcher (and
    // orphan the job); writes then fail quietly. Workers get default dispositions.
    std::signal(SIGPIPE, SIG_IGN);
    return launch::launch(o).exit_code;
  };
}

CommandRegistrar reg({"run", "Run a program as the workers of a distributed job (like torchrun)",
                      setup_run});

}  // namespace
}  // namespace cohort::cli
