// JobCoordinator: how the launchers of a multi-node job act as one, through
// the job's store (served by node 0's launcher): torchrun's elastic agent
// semantics with a fixed world size.
//
//   join(attempt)      every node announces itself and waits for the others
//                      before starting the attempt's workers, saying every
//                      few seconds which nodes are missing; after the join
//                      time-out it throws naming them. Attempt N+1 starts
//                      only when every node has ended attempt N's workers.
//   report_failure()   the first failure of an attempt, anywhere, is written
//                      to the store ("rank 3 on node 1 (pid 4242) was killed
//                      by SIGKILL");
//   failure()          what a background watcher saw: another node's failure
//                      of this attempt, or that the store itself is gone
//                      (node 0 died or the link to it is cut). The launcher
//                      then stops its own workers.
//
// Every store call has a deadline; the watcher never blocks the launcher.
// Thread safety: join/report_failure/start_watch/stop_watch from the
// launcher's thread; failure() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cohort/rendezvous/tcp_store.h"

namespace cohort::launch {

struct JobCoordinatorOptions {
  std::string master_addr;
  int master_port = 0;
  std::string token;
  int nnodes = 1;
  int node_rank = 0;
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(120);
  std::chrono::milliseconds join_timeout = std::chrono::seconds(300);
  std::chrono::milliseconds report_interval = std::chrono::seconds(5);
  std::chrono::milliseconds watch_interval = std::chrono::milliseconds(200);
};

class JobCoordinator {
 public:
  explicit JobCoordinator(JobCoordinatorOptions options);
  ~JobCoordinator();
  JobCoordinator(const JobCoordinator&) = delete;
  JobCoordinator& operator=(const JobCoordinator&) = delete;

  void join(int attempt, const std::string& about_this_node);
  // Records `what` as attempt's failure unless another node's came first;
  // returns the failure that stands. A worker killed by a signal takes its
  // peers on other nodes down with it, and they may exit (with an error) and
  // be reported first: a signal death reported within 2 s of the first
  // failure stands as the cause instead.
  std::string report_failure(int attempt, const std::string& what, bool killed_by_signal);
  // The failure recorded for `attempt`, if any (a store read).
  std::optional<std::string> recorded_failure(int attempt);

  void start_watch(int attempt);
  void stop_watch();
  std::optional<std::string> failure() const;

 private:
  rendezvous::TcpStoreOptions store_options(std::chrono::milliseconds timeout) const;
  std::string store_name() const;

  JobCoordinatorOptions o_;
  std::unique_ptr<rendezvous::TcpStore> store_;
  std::thread watcher_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::optional<std::string> failure_;
};

}  // namespace cohort::launch
