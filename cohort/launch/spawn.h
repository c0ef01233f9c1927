// cohort::spawn: runs fn(rank) in nprocs forked processes of this program,
// like torch.multiprocessing.spawn. Each child sees the variables `cohort run`
// sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, COHORT_TOKEN, COHORT_STORE_HOSTED=1, thread counts) and can
// call rendezvous::bootstrap("env://"); the calling process hosts the store
// until every child has ended. spawn returns when all children succeeded.
//
// Failure: when a child throws or exits non-zero or is killed, the others
// are stopped (SIGTERM, then SIGKILL after options.grace) and spawn throws
// SpawnError naming the first failed rank with its exception message or exit
// status. Past options.timeout all children are killed and TimeoutError
// is thrown.
//
// Caveat of fork without exec: the children are copies of the calling
// process in which only the calling thread runs; call spawn before starting
// threads of your own. (If the parent already used parallel_for, the pool's
// threads are missing in the children and their parallel_for runs serially.)
// Thread safety: call from one thread at a time.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/launch/child_process.h"

namespace cohort {

struct SpawnOptions {
  bool pin = true;  // split the CPUs between children and set their thread budget
  std::chrono::milliseconds timeout = std::chrono::hours(24);
  std::chrono::milliseconds grace = std::chrono::seconds(5);  // SIGTERM -> SIGKILL
  std::vector<std::pair<std::string, std::string>> extra_env;
};

// A child of spawn() failed; what() names the rank and the cause.
class SpawnError : public Error {
 public:
  SpawnError(const std::string& what, int rank, launch::ExitStatus status)
      : Error(what), rank_(rank), status_(status) {}
  int rank() const { return rank_; }
  const launch::ExitStatus& status() const { return status_; }

 private:
  int rank_;
  launch::ExitStatus status_;
};

void spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& options = {});

}  // namespace cohort
