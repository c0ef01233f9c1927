#include "cohort/launch/orphan_guard.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Gone or a zombie (init reaps an orphan when it gets to it); a hang guard.
bool gone(pid_t pid, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (true) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!stat || !std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z')
      return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);
  }
}

void sleep_forever() {
  for (int i = 0; i < 600; ++i) ::poll(nullptr, 0, 100);  // bounded: 60 s
}

struct Pids {
  pid_t worker = -1, grandchild = -1;
};

enum class End { kKilled, kGoodbye, kForgotten };

// A stand-in launcher: an OrphanGuard and one worker (`sh`, exec'd, in its
// own process group), which has started a grandchild (`sleep`) in the same
// group, as a SIGKILLed launcher would leave them. It tells the test the
// worker's pid once the guard watches it (the worker writes the
// grandchild's to a file), then, per `end`, waits to be killed, or says
// goodbye first, or forgets the group first.
struct StandIn {
  ChildProcess launcher;
  Pids pids;
  std::string pid_file;

  explicit StandIn(End end) {
    pid_file = ::testing::TempDir() + "orphan_guard_" + std::to_string(::getpid()) + "_" +
               std::to_string(static_cast<int>(end));
    std::remove(pid_file.c_str());
    ChildSpec spec;
    spec.argv = {"/bin/sh", "-c",
                 "sleep 60 & echo $! > " + pid_file + ".tmp && mv " + pid_file + ".tmp " +
                     pid_file + "; wait"};
    spec.env = environment_with({});
    int from_launcher[2];
    EXPECT_EQ(::pipe(from_launcher), 0);
    const int lw = from_launcher[1];
    launcher = ChildProcess::fork_call({}, [lw, end, &spec] {
      auto guard = std::make_unique<OrphanGuard>();
      ChildProcess worker = ChildProcess::exec(spec);
      guard->watch(worker.pid());
      if (end == End::kForgotten) guard->forget(worker.pid());
      if (end == End::kGoodbye) guard.reset();
      const pid_t pid = worker.pid();
      [[maybe_unused]] ssize_t n = ::write(lw, &pid, sizeof(pid));
      sleep_forever();
      return 0;
    });
    ::close(lw);
    pids.worker = read_pid(from_launcher[0]);
    for (int i = 0; i < 1000 && pids.grandchild <= 0; ++i) {  // bounded: 10 s
      std::ifstream(pid_file) >> pids.grandchild;
      if (pids.grandchild <= 0) std::this_thread::sleep_for(10ms);
    }
  }
  ~StandIn() { std::remove(pid_file.c_str()); }

  static pid_t read_pid(int fd) {
    pid_t p = -1;
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, 10000) > 0 && ::read(fd, &p, sizeof(p)) != ssize_t(sizeof(p))) p = -1;
    ::close(fd);
    return p;
  }
};

TEST(OrphanGuard, KillsTheWorkersProcessGroupsWhenTheLauncherIsKilled) {
  StandIn s(End::kKilled);
  ASSERT_GT(s.pids.worker, 0);
  ASSERT_GT(s.pids.grandchild, 0);
  EXPECT_FALSE(gone(s.pids.grandchild, 0s));
  s.launcher.kill_and_reap();
  // The worker dies of PR_SET_PDEATHSIG; the grandchild only through the guard.
  EXPECT_TRUE(gone(s.pids.worker, 10s)) << "the worker outlived its launcher";
  EXPECT_TRUE(gone(s.pids.grandchild, 10s)) << "the worker's own child outlived the launcher";
}

TEST(OrphanGuard, KillsNothingAfterAGoodbye) {
  StandIn s(End::kGoodbye);
  ASSERT_GT(s.pids.grandchild, 0);
  s.launcher.kill_and_reap();
  EXPECT_TRUE(gone(s.pids.worker, 10s));  // PDEATHSIG, as before
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(gone(s.pids.grandchild, 0s)) << "a guard that was told goodbye still killed";
  ::kill(s.pids.grandchild, SIGKILL);
}

TEST(OrphanGuard, KillsNoGroupItWasToldToForget) {
  StandIn s(End::kForgotten);
  ASSERT_GT(s.pids.grandchild, 0);
  s.launcher.kill_and_reap();
  EXPECT_TRUE(gone(s.pids.worker, 10s));
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(gone(s.pids.grandchild, 0s)) << "a forgotten process group was killed";
  ::kill(s.pids.grandchild, SIGKILL);
}

}  // namespace
}  // namespace cohort::launch
