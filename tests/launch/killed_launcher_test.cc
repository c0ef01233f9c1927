// A `cohort run` launcher killed with SIGKILL takes its workers with it at
// once: each dies of the kernel's parent-death signal (PR_SET_PDEATHSIG), and
// what a worker started itself (the program behind a `sh -c` wrapper) dies
// through the launcher's orphan guard (cohort/launch/orphan_guard.h). The
// test process is a child subreaper (subreaper.h) so that it inherits the
// orphans and reaps them itself: the time measured is their death, not how
// soon this machine's init reaps orphans (issue 43: 1.1-1.9 s here, init's
// timer). Every wait has a hang guard.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/launch/cohort_run.h"
#include "tests/launch/subreaper.h"

namespace {

using namespace cohort_launch_test;

pid_t read_pid(const std::filesystem::path& file) {
  pid_t pid = -1;
  std::ifstream(file) >> pid;
  return pid;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Two workers (`worker` runs with DIR appended, and writes DIR/pid<rank> and
// DIR/ready<rank>); SIGKILL to the launcher once both are ready. Checks that
// the processes whose pids the workers wrote die of SIGKILL, without the
// SIGTERM a stopping launcher sends (no DIR/term<rank>), within a bound no
// loaded machine comes near (they die in a few ms; the bound fails a worker
// that lingers or runs on), and that the orphan guard ends too.
void expect_killed_launcher_takes_the_workers(const std::string& name,
                                              std::vector<std::string> worker) {
  Subreaper reaper;
  ASSERT_TRUE(reaper.ok()) << "prctl(PR_SET_CHILD_SUBREAPER) failed";
  const auto dir = temp_dir(name);
  std::vector<std::string> args = {"run", "--nproc-per-node", "2", "--"};
  args.insert(args.end(), worker.begin(), worker.end());
  args.push_back(dir.string());
  CohortRun run(args);
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1"})) << run.finish(10s).err;
  // The two workers and the orphan guard.
  const std::vector<Process> children = children_of(run.pid());
  int guards = 0;
  for (const Process& c : children) guards += c.name == "cohort-guard" ? 1 : 0;
  EXPECT_EQ(guards, 1) << "no orphan guard among the launcher's children";
  EXPECT_EQ(children.size(), 3u);
  const pid_t pids[2] = {read_pid(dir / "pid0"), read_pid(dir / "pid1")};
  const auto killed_at = Clock::now();
  ::kill(run.pid(), SIGKILL);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(pids[rank], 0) << "rank " << rank;
    if (pids[rank] <= 0) continue;
    const auto status = reaper.reap(pids[rank], 10s);
    const double took = seconds_since(killed_at);
    if (!status) {
      ADD_FAILURE() << "rank " << rank << " (pid " << pids[rank]
                    << ") still running 10 s after its launcher was killed";
      ::kill(pids[rank], SIGKILL);  // no leftover, even when failing
      reaper.reap(pids[rank], 10s);
      continue;
    }
    if (status->status) {  // else its shell, dying too, reaped it first
      EXPECT_EQ(status->status->signal, SIGKILL)
          << "rank " << rank << " " << status->status->describe();
    }
    EXPECT_LT(took, 1.0) << "rank " << rank << " died " << took << " s after its launcher";
    EXPECT_FALSE(std::filesystem::exists(dir / ("term" + std::to_string(rank))))
        << "rank " << rank << " was sent SIGTERM, not killed with its launcher";
  }
  // The launcher's children themselves (the same workers, or their shells),
  // and the guard, which exits once it has killed the workers' groups.
  for (const Process& c : children) {
    if (c.pid == pids[0] || c.pid == pids[1]) continue;  // reaped above
    const auto status = reaper.reap(c.pid, 10s);
    if (!status) {
      ADD_FAILURE() << c.name << " (pid " << c.pid << ") outlived its launcher by 10 s";
      ::kill(c.pid, SIGKILL);
      reaper.reap(c.pid, 10s);
    } else if (!status->status) {
      continue;  // reaped by its dying parent: ended, how is not known
    } else if (c.name == "cohort-guard") {
      EXPECT_TRUE(status->status->success()) << "the orphan guard " << status->status->describe();
    } else {
      EXPECT_EQ(status->status->signal, SIGKILL)
          << c.name << " (pid " << c.pid << ") " << status->status->describe();
    }
  }
  RunResult r = run.finish(10s);
  EXPECT_EQ(r.status.signal, SIGKILL) << r.status.describe();
  std::filesystem::remove_all(dir);
}

TEST(KilledLauncher, ItsWorkersDieAtOnceOfTheParentDeathSignal) {
  expect_killed_launcher_takes_the_workers("killed_launcher_workers",
                                           {COHORT_TEST_WORKER, "wait-term"});
}

// The launcher's worker is a shell; the test worker is the shell's child,
// which PR_SET_PDEATHSIG never reaches: it dies through the orphan guard,
// which kills the worker's process group. Without the guard it ran on.
TEST(KilledLauncher, WhatItsWorkersStartedDiesWithThem) {
  expect_killed_launcher_takes_the_workers(
      "killed_launcher_wrapped",
      {"/bin/sh", "-c", "\"$0\" wait-term \"$1\"; true", COHORT_TEST_WORKER});
}

}  // namespace
