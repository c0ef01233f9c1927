// Runs a function as n forked processes (the ranks of a test job) and
// collects their exit statuses; children still running after the limit are
// killed and reported, so a hang fails the test instead of blocking ctest.
// A child exits 0 when fn returns, 1 (message on stderr) when it throws.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace cohort::testing {

// A fresh path: PIDs are reused, and a store file left by an earlier run under
// this pid would hand the new job that run's keys.
inline std::string temp_path(const std::string& base) {
  static int counter = 0;
  std::string path =
      "/tmp/" + base + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  ::unlink(path.c_str());
  return path;
}

inline std::vector<int> run_processes(int n, std::chrono::seconds limit,
                                      const std::function<void(int rank)>& fn) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(static_cast<size_t>(n), -1);
  auto deadline = std::chrono::steady_clock::now() + limit;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      int st = 0;
      if (status[static_cast<size_t>(r)] == -1 &&
          ::waitpid(pids[static_cast<size_t>(r)], &st, WNOHANG) > 0) {
        status[static_cast<size_t>(r)] = st;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (status[static_cast<size_t>(r)] != -1) continue;
        ::kill(pids[static_cast<size_t>(r)], SIGKILL);
        ::waitpid(pids[static_cast<size_t>(r)], nullptr, 0);
        ADD_FAILURE() << "rank " << r << " still ran after " << limit.count() << " s (a hang)";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

inline bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace cohort::testing
