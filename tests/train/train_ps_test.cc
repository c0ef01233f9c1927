// `cohort train --strategy ps` end to end: the first --ps-servers ranks
// serve, the others train. Sync equals DDP over the trainers (checkpoint for
// checkpoint, on the baseline kernels); ssp and async train; a parameter
// server checkpoint resumes in one process; in async mode a trainer killed
// mid-run is dropped and the job finishes when the launcher tolerates the
// loss (--max-lost-workers); in sync mode the others fail naming it.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kBaseline = {"COHORT_KERNELS=baseline"};

double final_train_loss(const std::string& output) {
  std::smatch m;
  std::regex re("epoch \\d+: train loss ([0-9.]+)");
  double loss = -1;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re);
       it != std::sregex_iterator(); ++it) {
    loss = std::stod((*it)[1]);
  }
  return loss;
}

TEST(TrainPs, SyncMatchesDdpOverTheTrainers) {
  std::string ps = make_temp_dir("ps_sync");
  Finished f = run_command(run_argv(3, {},
                                    {"--strategy", "ps", "--ps-servers", "1", "--ps-mode", "sync",
                                     "--max-steps", "4", "--checkpoint-dir", ps}),
                           kBaseline);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("parameter server sync: 1 server + 2 trainers"), std::string::npos)
      << f.output;
  std::string ddp = make_temp_dir("ps_ddp");
  Finished g = run_command(
      run_argv(2, {}, {"--strategy", "ddp", "--max-steps", "4", "--checkpoint-dir", ddp}),
      kBaseline);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  expect_close_checkpoints(step_dir(ddp, 4), step_dir(ps, 4));
}

TEST(TrainPs, TwoServersShardTheModelAndMatchDdp) {
  std::string ps = make_temp_dir("ps_two");
  Finished f = run_command(run_argv(4, {},
                                    {"--strategy", "ps", "--ps-servers", "2", "--max-steps", "3",
                                     "--checkpoint-dir", ps}),
                           kBaseline);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::string ddp = make_temp_dir("ps_two_ddp");
  Finished g = run_command(
      run_argv(2, {}, {"--strategy", "ddp", "--max-steps", "3", "--checkpoint-dir", ddp}),
      kBaseline);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  expect_close_checkpoints(step_dir(ddp, 3), step_dir(ps, 3));
}

class PsModes : public ::testing::TestWithParam<std::string> {};

TEST_P(PsModes, TrainTheModel) {
  // Two epochs of 4 steps per trainer: the loss must come down.
  Finished f = run_command(run_argv(3, {},
                                    {"--strategy", "ps", "--ps-mode", GetParam(), "--ps-staleness",
                                     "1", "--epochs", "3", "--lr", "0.01"}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::smatch m;
  std::regex first("epoch 1: train loss ([0-9.]+)");
  ASSERT_TRUE(std::regex_search(f.output, m, first)) << f.output;
  EXPECT_LT(final_train_loss(f.output), std::stod(m[1])) << f.output;
}

INSTANTIATE_TEST_SUITE_P(TrainPs, PsModes, ::testing::Values("ssp", "async"));

TEST(TrainPs, CheckpointResumesInOneProcess) {
  std::string ps = make_temp_dir("ps_ckpt");
  Finished f = run_command(run_argv(
      3, {},
      {"--strategy", "ps", "--ps-mode", "async", "--max-steps", "2", "--checkpoint-dir", ps}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::string single = make_temp_dir("ps_single");
  Finished g = run_command(train_argv({"--strategy", "single", "--max-steps", "3",
                                       "--checkpoint-dir", single, "--resume", step_dir(ps, 2)}));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("resumed from " + step_dir(ps, 2) + " at step 2"), std::string::npos)
      << g.output;
}

// A 3-trainer job long enough to kill trainer 2 (world rank 3) mid-run.
std::vector<std::string> long_job(const std::string& mode) {
  return {"--strategy", "ps",       "--ps-mode", mode,          "--synthetic-train-size",
          "6144",       "--epochs", "2",         "--log-every", "1"};
}

bool kill_rank_after_steps(Background& bg, int rank) {
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (bg.output().find("step 3/") != std::string::npos) {
      pid_t w = find_worker(bg.pid(), rank);
      if (w > 0 && kill(w, SIGKILL) == 0) return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(TrainPs, AsyncDropsAKilledTrainerAndTheOthersFinish) {
  Background bg(run_argv(4, {"--max-lost-workers", "1"}, long_job("async")));
  ASSERT_TRUE(kill_rank_after_steps(bg, 3)) << bg.output();
  int code = bg.wait(120s);
  ASSERT_EQ(code, 0) << bg.output();
  const std::string out = bg.output();
  EXPECT_NE(out.find("trainer 'trainer2' was lost"), std::string::npos) << out;
  EXPECT_NE(out.find("job finished without 1 lost worker: rank 3"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 2: train loss"), std::string::npos) << out;
}

TEST(TrainPs, SyncFailsNamingAKilledTrainer) {
  Background bg(run_argv(4, {}, long_job("sync")));
  ASSERT_TRUE(kill_rank_after_steps(bg, 3)) << bg.output();
  int code = bg.wait(60s);
  ASSERT_NE(code, -1) << "still running 60 s after a trainer was killed:\n" << bg.output();
  EXPECT_NE(code, 0) << bg.output();
  EXPECT_NE(bg.output().find("job failed: rank 3"), std::string::npos) << bg.output();
}

}  // namespace
}  // namespace cohort::test
