// CohortRun: the real cohort binary as a child of a launcher test, with its
// output gathered and a watchdog: a run that does not end within it is
// killed (with its process group) and reported as hung, so a broken launcher
// fails the test instead of hanging the suite. Shared by the launcher's
// end-to-end tests (tests/launch/*_test.cc).
//
// Thread safety: none; one test thread drives a CohortRun.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cohort/launch/child_process.h"

namespace cohort_launch_test {

using namespace std::chrono_literals;
using cohort::launch::ChildProcess;
using cohort::launch::ChildSpec;
using cohort::launch::environment_with;
using cohort::launch::ExitStatus;
using Clock = std::chrono::steady_clock;

struct RunResult {
  std::string out, err;
  ExitStatus status;
  bool hung = false;
};

// Starts cohort with args; `during` (if given) runs while it is running.
class CohortRun {
 public:
  explicit CohortRun(std::vector<std::string> args) {
    ChildSpec spec;
    spec.argv = {COHORT_BIN};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = environment_with({{"COHORT_TOKEN", ""}});
    spec.capture_output = true;
    proc_ = ChildProcess::exec(spec);
  }

  explicit CohortRun(const ChildSpec& spec) : proc_(ChildProcess::exec(spec)) {}

  pid_t pid() const { return proc_.pid(); }

  // Reads output until cohort exits or the watchdog passes.
  RunResult finish(std::chrono::seconds watchdog = 60s) {
    RunResult r;
    auto deadline = Clock::now() + watchdog;
    while (true) {
      pump(r);
      if (auto s = proc_.poll()) {
        pump(r);
        r.status = *s;
        return r;
      }
      if (Clock::now() >= deadline) {
        r.hung = true;
        proc_.kill_and_reap();
        r.status = *proc_.poll();
        return r;
      }
    }
  }

 private:
  void pump(RunResult& r) {
    pollfd fds[2] = {{proc_.stdout_fd(), POLLIN, 0}, {proc_.stderr_fd(), POLLIN, 0}};
    if (::poll(fds, 2, 50) <= 0) return;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        i == 0 ? proc_.close_stdout() : proc_.close_stderr();
      }
    }
  }

  ChildProcess proc_;
};

inline RunResult run_cohort(std::vector<std::string> args, std::chrono::seconds watchdog = 60s) {
  return CohortRun(std::move(args)).finish(watchdog);
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    out.push_back(text.substr(pos, nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return out;
}

// Gone or a zombie (whoever inherited it may not have reaped it yet); a
// worker whose launcher died gets SIGKILL from the kernel (PDEATHSIG), so
// the wait is a hang guard, not a time asserted.
inline bool process_gone(pid_t pid, std::chrono::seconds limit = 10s) {
  const auto until = Clock::now() + limit;
  while (true) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!stat || !std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z')
      return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(50ms);
  }
}

// Waits (hang guard only) until every path exists.
inline bool wait_for_files(const std::vector<std::filesystem::path>& paths,
                           std::chrono::seconds limit = 30s) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    bool all = true;
    for (const auto& p : paths) all = all && std::filesystem::exists(p);
    if (all) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("cohort_launch_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace cohort_launch_test
