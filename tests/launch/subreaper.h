// Subreaper: while one lives, this test process is a child subreaper
// (PR_SET_CHILD_SUBREAPER): a process among its descendants whose parent
// dies -- the workers of a SIGKILLed `cohort run` -- becomes its child
// instead of init's, so the test can reap it and read how and when it died.
// Without it a dead orphan stays a zombie until init reaps it, which on some
// machines takes a second or two (a VM's init that reaps on a timer): that
// delay is init's, not the launcher's (issue 43).
//
// Thread safety: none; one test thread. Tests that use one must reap the
// orphans they expect (reap()); an orphan left unreaped stays a zombie child
// of the test process until it exits.
#pragma once

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/launch/child_process.h"

namespace cohort_launch_test {

struct Process {
  pid_t pid;
  std::string name;  // comm
};

// The children of `parent` (to reap after their parent is killed).
inline std::vector<Process> children_of(pid_t parent) {
  std::vector<Process> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size())
      continue;
    if (std::strtol(stat.c_str() + close + 4, nullptr, 10) == parent)
      out.push_back({static_cast<pid_t>(pid), stat.substr(open + 1, close - open - 1)});
  }
  ::closedir(d);
  return out;
}

class Subreaper {
 public:
  Subreaper() { ok_ = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }
  ~Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  Subreaper(const Subreaper&) = delete;
  Subreaper& operator=(const Subreaper&) = delete;

  bool ok() const { return ok_; }

  // How a process ended: its status when this process reaped it; none when
  // its own dying parent reaped it first (a shell blocked in wait() reaps a
  // child that dies with it, its own pending SIGKILL notwithstanding).
  struct Ended {
    std::optional<cohort::launch::ExitStatus> status;
  };

  // Waits until pid, a child of this process or a descendant that becomes
  // one when its parent dies, has ended, and reaps it. nullopt when it is
  // still running after limit: a hang guard.
  std::optional<Ended> reap(pid_t pid, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (true) {
      int st = 0;
      const pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == pid) return Ended{cohort::launch::ExitStatus::from_wait_status(st)};
      // 0: our child, still running; ECHILD: not reparented to us yet, or
      // reaped by someone else once it is gone from /proc.
      if (r < 0 && errno == ECHILD && !std::ifstream("/proc/" + std::to_string(pid) + "/stat"))
        return Ended{};
      if (r < 0 && errno != ECHILD && errno != EINTR) return std::nullopt;
      if (std::chrono::steady_clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Once whatever could have reaped pid has ended: reaps it (blocking, so
  // only for a process that has ended) if it was orphaned to this process.
  void reap_if_orphaned(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return;
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 4 > stat.size()) return;
    if (std::strtol(stat.c_str() + close + 4, nullptr, 10) == ::getpid())
      reap(pid, std::chrono::seconds(10));
  }

 private:
  bool ok_ = false;
};

}  // namespace cohort_launch_test
