// WorkerGroup: one attempt of a job on this node: starts the local workers,
// forwards their output line by line with a "[rank N] " prefix (stdout and
// stderr kept apart), forwards SIGINT/SIGTERM, and when a worker fails stops
// the others (SIGTERM, then SIGKILL after the grace period) unless it is one
// of the first max_lost_workers failures, which are reported and tolerated. Used by
// launch(); one object per attempt. Once all have ended, shared-memory names
// a worker left (killed during its bootstrap) are removed.
//
// Every wait is driven by child exit, output, signals or the grace deadline.
// Thread safety: none.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/launch/child_process.h"
#include "cohort/launch/orphan_guard.h"
#include "cohort/launch/signal_watcher.h"

namespace cohort::launch {

struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  ChildSpec child;  // capture_output is set by the group
};

struct WorkerFailure {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  ExitStatus status;
};

struct AttemptResult {
  std::optional<WorkerFailure> failure;  // the first worker to fail, or one killed from outside
  int interrupted_by = 0;                // SIGINT/SIGTERM received, or 0
  std::string stopped_by;                // external_stop's reason, or ""
  std::vector<WorkerFailure> lost;       // failures tolerated (max_lost_workers), in order
  int worker_restarts = 0;               // workers started again in place (max_worker_restarts)
};

struct WorkerGroupOptions {
  std::chrono::milliseconds grace = std::chrono::seconds(5);
  // Failed workers the group lets go on without (reported, the others keep
  // running); the next failure stops the group as usual. For jobs that
  // survive losing workers (an asynchronous parameter server).
  int max_lost_workers = 0;
  // Fault-tolerant jobs (parallel/fault_tolerance/): a worker that fails is
  // started again in its place, with COHORT_FT_REPLACEMENT=1, while the
  // others go on, up to this many times per worker (and only while another
  // worker still runs: once the others ended there is no job to rejoin);
  // past that it is lost (AttemptResult::lost) and the others go on. -1: off.
  int max_worker_restarts = -1;
  // With max_worker_restarts: local workers [k*R, (k+1)*R) are one replica
  // of R processes, which fails and restarts as one (ReplicaManager's
  // group_size): when one of them fails the others are SIGKILLed, and once
  // all have ended they are started again together (a restart of each),
  // unless a worker of this node already finished the job.
  int replica_size = 1;
  // Polled every loop (about every 250 ms): a reason stops the workers as a
  // failure elsewhere in the job would (SIGTERM, grace, SIGKILL), and their
  // exits are not failures of their own. Must not block.
  std::function<std::optional<std::string>()> external_stop;
  // Readable once external_stop has a reason (the launcher link's loss
  // event): wakes the group at once instead of at its next loop. -1: none.
  int external_stop_fd = -1;
  // Called once, after the first SIGINT/SIGTERM was forwarded to the
  // workers, so the other nodes of the job hear of it while this one stops.
  std::function<void(int sig)> on_interrupt;
  // Told of each worker's process group while it runs, so that it kills them
  // if the launcher dies (orphan_guard.h). Not owned; nullptr: none.
  OrphanGuard* orphan_guard = nullptr;
  bool prefix_output = true;
  int stdout_fd = 1;
  int stderr_fd = 2;
};

class WorkerGroup {
 public:
  WorkerGroup(std::vector<WorkerSpec> workers, WorkerGroupOptions options);
  // Starts the workers and returns when all have ended. Throws IoError if a
  // worker cannot be started (those already started are killed).
  AttemptResult run(SignalWatcher& signals);

 private:
  std::vector<WorkerSpec> specs_;
  WorkerGroupOptions options_;
};

}  // namespace cohort::launch
