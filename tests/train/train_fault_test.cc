// A worker of a distributed `cohort train` killed mid-epoch: the launcher
// stops the others and reports the failure; with --max-restarts 1 the job
// resumes from the last checkpoint and ends with the same parameters as an
// uninterrupted run.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

using namespace std::chrono_literals;

// 80 steps (2048 examples, two ranks: 16 steps per epoch, 5 epochs), a
// checkpoint every 4: long enough that the kill after the first checkpoint
// lands mid-run.
std::vector<std::string> job(const std::string& dir) {
  return {"--synthetic-train-size",
          "2048",
          "--epochs",
          "5",
          "--max-steps",
          "80",
          "--checkpoint-every",
          "4",
          "--checkpoint-dir",
          dir,
          "--resume",
          "auto",
          "--log-every",
          "1"};
}

// Waits until `root` holds checkpoint `step`, then SIGKILLs the rank-1 worker
// of the launcher `bg`. Returns false when that did not happen in time.
bool kill_rank1_after(Background& bg, const std::string& root, int64_t step) {
  auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(step_dir(root, step))) {
      pid_t w = find_worker(bg.pid(), 1);
      if (w > 0 && kill(w, SIGKILL) == 0) return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(TrainFault, KilledWorkerStopsTheJobWithAReport) {
  std::string dir = make_temp_dir("kill");
  Background bg(run_argv(2, {}, job(dir)));
  ASSERT_TRUE(kill_rank1_after(bg, dir, 4)) << bg.output();
  // The launcher must notice and stop rank 0 (which blocks in a collective);
  // a hang would show up here.
  int code = bg.wait(10s);
  ASSERT_NE(code, -1) << "cohort run still running 10 s after a worker was killed:\n"
                      << bg.output();
  EXPECT_NE(code, 0);
  std::string out = bg.output();
  EXPECT_NE(out.find("job failed: rank"), std::string::npos) << out;
  // The launcher names the killed rank, even when rank 0 (whose collective
  // broke) exited before the launcher reaped rank 1.
  EXPECT_NE(out.find("job failed: rank 1"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(step_dir(dir, 80))) << out;
}

TEST(TrainFault, RestartResumesFromLastCheckpointAndMatchesUninterruptedRun) {
  std::string straight = make_temp_dir("straight_fault");
  Finished ref = run_command(run_argv(2, {}, job(straight)));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  std::string dir = make_temp_dir("restart");
  Background bg(run_argv(2, {"--max-restarts", "1"}, job(dir)));
  ASSERT_TRUE(kill_rank1_after(bg, dir, 4)) << bg.output();
  int code = bg.wait(240s);
  std::string out = bg.output();
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("restarting the group"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + dir + "/step-"), std::string::npos) << out;
  expect_same_checkpoint(step_dir(straight, 80), step_dir(dir, 80));
}

}  // namespace
}  // namespace cohort::test
