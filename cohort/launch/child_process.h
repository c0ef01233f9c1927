// ChildProcess: one child process started by fork (and usually exec), owned
// by this object. The child runs in its own process group (signals go to the
// whole group, so a worker's own children stop with it), dies with its parent
// (PR_SET_PDEATHSIG; the kernel signals the child alone, not what it started,
// which is why the launcher also runs an OrphanGuard, orphan_guard.h), may be
// pinned to CPUs, and may have its stdout/stderr captured in pipes.
// Destroying a ChildProcess that is still running kills its group with
// SIGKILL and reaps it, so no child outlives its owner.
//
// Thread safety: none; one owner at a time (move only).
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/unique_fd.h"

namespace cohort::launch {

// How a child ended.
struct ExitStatus {
  int code = 0;    // exit code when it exited
  int signal = 0;  // the signal that killed it, or 0
  bool success() const { return signal == 0 && code == 0; }
  // "exited with code 3" / "was killed by signal 9 (SIGKILL)"
  std::string describe() const;
  // A shell-style code: code, or 128 + signal.
  int shell_code() const { return signal ? 128 + signal : code; }
  static ExitStatus from_wait_status(int status);
};

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH unless it has a '/'
  std::vector<std::string> env;   // the child's whole environment, "NAME=value"
  std::vector<int> cpus;          // CPUs to pin to; empty: inherit
  bool capture_output = false;    // stdout and stderr into pipes (stdout_fd/stderr_fd)
  bool null_stdin = true;         // stdin from /dev/null
  // SIGKILL when the thread that started it exits (PR_SET_PDEATHSIG), which
  // for a launcher means when it dies; off only for what must outlive it.
  bool die_with_parent = true;
};

class ChildProcess {
 public:
  ChildProcess() = default;
  // Forks and execs spec.argv. Throws IoError when fork fails or the program
  // cannot be executed (the exec error is reported back through a pipe).
  static ChildProcess exec(const ChildSpec& spec);
  // Forks and runs body() in the child, which then exits with body's return
  // value (stdio flushed, no static destructors). spec.argv and spec.env are
  // ignored. body must not return to the caller's stack: it runs in a copy of
  // this process, where only the calling thread exists.
  static ChildProcess fork_call(const ChildSpec& spec, const std::function<int()>& body);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Read ends of the captured output (non-blocking), or -1.
  int stdout_fd() const { return out_.get(); }
  int stderr_fd() const { return err_.get(); }
  void close_stdout() { out_.reset(); }
  void close_stderr() { err_.reset(); }

  // Reaps the child if it has ended (never blocks); returns its status once known.
  std::optional<ExitStatus> poll();
  bool running() { return !poll().has_value(); }
  // Sends sig to the child's process group; no-op once reaped.
  void signal(int sig);
  // SIGKILL to the group and blocking reap (bounded: SIGKILL cannot be ignored).
  void kill_and_reap();

 private:
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  UniqueFd out_;
  UniqueFd err_;
};

// The calling process's environment as "NAME=value" strings, with each name
// in overrides set to its value (added when missing).
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace cohort::launch
