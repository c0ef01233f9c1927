// OrphanGuard: a small process, forked by the launcher, that kills the
// launcher's worker process groups when the launcher dies without stopping
// them (SIGKILL, a crash), so that nothing of the job is left running.
//
// Why a process: a worker dies with its launcher through PR_SET_PDEATHSIG
// (child_process.h), but the kernel sends that signal to the worker alone.
// What the worker started itself (the real program behind a `sh -c`, a
// `bash train.sh` or `timeout` wrapper, a helper process) is reparented to
// init and runs on, and so does a worker whose death signal an exec of a
// set-uid program cleared. Nothing inside a SIGKILLed launcher can act, so
// the guard outlives it: it holds one end of a socket pair whose other end
// only the launcher holds (close-on-exec, so no worker inherits it), learns
// from the launcher which process groups are running, and when the socket
// hangs up without a goodbye it sends SIGKILL to each of them and exits.
// The hang-up comes when the launcher's last thread has gone, whichever
// thread started the workers, and every copy of its end is closed: workers
// are exec'd, which closes theirs; a child forked without exec would hold
// it until it ends.
//
// A guard does not make a dead worker's exit status disappear any sooner:
// workers of a killed launcher are zombies until whoever inherits them
// (init, or the nearest PR_SET_CHILD_SUBREAPER) reaps them.
//
// Failure: the constructor throws IoError when the socket pair or the fork
// fails. If the guard process itself dies, watch/forget fail quietly (no
// SIGPIPE) and the launcher goes on without it. The destructor says goodbye
// (nothing is killed), closes the socket and reaps the guard.
//
// Thread safety: construct before starting threads (fork_call), then one
// thread at a time calls watch/forget.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "cohort/base/unique_fd.h"
#include "cohort/launch/child_process.h"

namespace cohort::launch {

class OrphanGuard {
 public:
  // Process groups followed at once; beyond this, watch() is a no-op.
  static constexpr int kMaxGroups = 4096;

  OrphanGuard();
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // A worker's process group (its pid, ChildProcess runs each in its own) is running.
  void watch(pid_t pgid);
  // It has ended (the worker reaped); from here its id may be reused, so the
  // guard must no longer kill it.
  void forget(pid_t pgid);
  pid_t pid() const { return guard_.pid(); }

 private:
  void send(int32_t message);

  UniqueFd socket_;  // the launcher's end
  ChildProcess guard_;
};

}  // namespace cohort::launch
