// JobCoordinator: how the launchers of a multi-node job act as one, through
// the job's store (served by node 0's launcher): torchrun's elastic agent
// semantics with a fixed world size. Every step is a key under
// "__cohort_launcher/", so any node can read where the others are.
//
//   constructor        connects to node 0's store, retrying (and saying what
//                      it tries) until the connect time-out; then it throws
//                      naming this node and the store's address.
//   join(attempt)      every node announces itself (host, address, pid,
//                      workers) and waits for the others before starting the
//                      attempt's workers, saying every report_interval which
//                      nodes are missing; after the join time-out it throws
//                      naming them. Attempt N+1 starts only when every node
//                      has ended attempt N's workers, so a node that does
//                      not come back fails the others instead of holding them.
//   report_failure()   the first failure of an attempt, anywhere, is written
//                      to the store ("rank 3 (local rank 1 on node 1, pid
//                      4242) was killed by SIGKILL");
//   failure()          what a background watcher saw: another node's failure
//                      of this attempt, or that the store itself is gone
//                      (node 0 died or the link to it is cut). The launcher
//                      then stops its own workers.
//   announce_stop()    this launcher was interrupted (SIGINT/SIGTERM): the
//                      attempt fails everywhere and nobody restarts.
//   finish(attempt)    the attempt's exit barrier. A node whose workers all
//                      succeeded still hears of a failure elsewhere in the
//                      same attempt, and restarts with the others; node 0,
//                      which serves the store, leaves last.
//   launcher_lost()    the launchers also watch each other directly
//                      (launcher_link.h): every node links to node 0's
//                      launcher before it announces itself in join(), so a
//                      launcher that dies (whatever the signal) or falls
//                      silent is seen by its peer at once, not when the
//                      workers notice. failure() then names it; nobody waits
//                      for a lost node at a barrier, and the job does not
//                      restart (announce_lost() tells the other nodes).
//   leave()            says goodbye on the links: this launcher ends on
//                      purpose. One that ends otherwise is, to the others,
//                      a launcher that died.
//
// Failure: errors name this node and the operation (the launcher prints them
// after "cohort run: job failed: "). Losing the store is an IoError whose
// message starts "lost the job's store at ADDR:PORT (node 0)"; a join that
// times out is a TimeoutError naming the missing nodes.
// Every store call has a deadline; the watcher never blocks the launcher.
//
// Thread safety: everything from the launcher's thread (the watcher and the
// link run threads of their own, whose findings failure() reads).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "cohort/launch/launcher_link.h"
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
  // Where the "waiting for node(s)" lines go (the launcher's stderr); none: silent.
  std::function<void(std::string_view)> report;
  // Polled while join() and finish() wait (must not block): a signal number
  // (SIGINT/SIGTERM to the launcher) ends the wait with an Error, so a
  // launcher waiting for absent nodes stops when asked to.
  std::function<int()> interrupted;
  // This launcher on the links (launcher_link.h): node 0 listens on
  // link_bind_host and publishes the port in the store.
  std::string link_bind_host;  // "": every interface
  std::string host;
  std::string address;
  std::chrono::milliseconds heartbeat = std::chrono::milliseconds(500);
  std::chrono::milliseconds silence_limit = std::chrono::seconds(5);
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
  // This launcher was interrupted: records `why` as attempt's failure and
  // marks the job stopped (no node restarts it); then leaves the attempt's
  // exit barrier without waiting. Errors are swallowed (the store may be gone).
  void announce_stop(int attempt, const std::string& why);
  // Whether some node's launcher was interrupted (announce_stop).
  bool job_stopped();

  // The exit barrier of `attempt`: waits up to `limit` for every node to end
  // its workers. With watch_failure, returns the attempt's failure as soon as
  // one is recorded (this node then restarts or fails with the others).
  // Otherwise waits for every node, then leaves (node 0 last) and returns
  // nullopt. Throws TimeoutError naming the nodes still running, or IoError
  // when the store is lost.
  std::optional<std::string> finish(int attempt, bool watch_failure,
                                    std::chrono::milliseconds limit);

  void start_watch(int attempt);
  void stop_watch();
  // What stops this attempt on this node: a lost launcher first, else what
  // the watcher saw (another node's failure, or the lost store).
  std::optional<std::string> failure() const;
  // The first launcher lost (died or silent), described; nullopt if none.
  std::optional<std::string> launcher_lost() const;
  // Readable once a launcher is lost (LauncherLink::lost_fd), -1 before the
  // link is up: a waiting launcher polls it to stop its workers at once.
  int lost_fd() const;
  // Node 0's launcher is lost or its store is: nothing more can be said to
  // the other nodes.
  bool store_gone() const;
  // A lost launcher ends the job: records `why` as attempt's failure and
  // marks the job stopped, so the other nodes fail too instead of
  // restarting. Errors are swallowed (the store may be gone).
  void announce_lost(int attempt, const std::string& why);
  // Goodbye on the links (see above).
  void leave();

  // "the job's store at ADDR:PORT (node 0)": how messages name it.
  std::string store_name() const;

 private:
  rendezvous::TcpStoreOptions store_options(std::chrono::milliseconds timeout) const;
  [[noreturn]] void throw_lost(const std::string& during, const std::exception& e) const;
  void say(const std::string& line) const;
  void check_interrupted(const std::string& during) const;

  JobCoordinatorOptions o_;
  LauncherLinkOptions link_options() const;
  void link_up(std::chrono::steady_clock::time_point deadline, const std::string& during);
  // Nodes not known lost: the ones a barrier waits for.
  std::vector<int> live_nodes() const;

  std::unique_ptr<rendezvous::TcpStore> store_;
  std::unique_ptr<LauncherLink> link_;
  struct Watch;
  std::optional<std::string> watched() const;  // what the watcher saw
  std::shared_ptr<Watch> watch_;
  std::thread watcher_;
};

}  // namespace cohort::launch
