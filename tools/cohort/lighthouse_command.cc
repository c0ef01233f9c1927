// `cohort lighthouse`: the quorum service of fault-tolerant training (and the
// job's key-value store) in a process of its own, for replicas started by
// something other than `cohort run --fault-tolerant` (a scheduler, a script):
// they find it through MASTER_ADDR / MASTER_PORT (docs/fault_tolerance.md).
// Serves until SIGINT or SIGTERM. The replicas present the job token
// (COHORT_TOKEN, the same for all).
#include <signal.h>

#include <cstdio>

#include "cohort/rendezvous/tcp_store_server.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

std::function<int()> setup(CLI::App& app) {
  auto bind = std::make_shared<std::string>("");
  auto port = std::make_shared<int>(29500);
  app.add_option("--bind", *bind,
                 "Address to listen on (\"\": every interface; 127.0.0.1: this host only)");
  app.add_option("--port", *port, "Port (0: the kernel picks one; printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  return [bind, port] {
    // Blocked before the server's thread starts, so that sigwait takes them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    rendezvous::TcpStoreServer server({.bind_host = *bind, .port = static_cast<uint16_t>(*port)});
    std::printf(
        "cohort lighthouse: the quorum service and store on %s:%u (until SIGINT or "
        "SIGTERM)\n",
        bind->empty() ? "*" : bind->c_str(), server.port());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    server.check();
    return 0;
  };
}

const CommandRegistrar registrar({"lighthouse",
                                  "Serve the quorum service of fault-tolerant training (and a "
                                  "job's store) in a process of its own",
                                  setup});

}  // namespace
}  // namespace cohort::cli
