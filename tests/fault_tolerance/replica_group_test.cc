// Replicas of several processes (ReplicaManagerOptions::group_size): two
// replicas of two processes each, ZeRO over each replica's processes, the
// gradient segments averaged across replicas through the manager's sharded
// hook. A process of one replica is SIGKILLed (or SIGSTOPped) mid-step: its
// partner stops, naming the lost process; the other replica goes on alone;
// the lost replica's processes, restarted together, receive the state from
// the live replica's (process g from process g) and train on. After each: no
// hang, every process's full parameters bit-identical and equal to one
// process replaying the committed steps (1e-5), every sample counted once.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/fault_tolerance/replica_harness.h"

namespace cohort::parallel {
namespace {

using namespace ft_testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

class ReplicaGroups : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');  // a parameterised test's name
    dir_ = fs::temp_directory_path() / fmt::format("cohort_ftg_{}_{}", ::getpid(), test);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    service_ = start_service();
  }
  void TearDown() override {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, WNOHANG);
    }
    if (service_.pid > 0) {
      ::kill(service_.pid, SIGKILL);
      ::waitpid(service_.pid, nullptr, 0);
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Both processes of replica `id`; faults[g] for process g.
  std::vector<pid_t> start(const std::string& id, std::map<int64_t, Fault> faults1 = {},
                           bool replacement = false, uint64_t seed = 7) {
    std::vector<pid_t> out;
    for (int g = 0; g < 2; ++g) {
      ReplicaGroupSpec s{.id = id,
                         .group_rank = g,
                         .zero_stage = GetParam(),
                         .seed = seed,
                         .steps = 30,
                         .initial_replicas = replacement ? 0 : 2,
                         .replacement = replacement,
                         .step_time = 10ms,
                         .step_time_alone = 200ms};
      if (g == 1) s.faults = faults1;
      out.push_back(fork_run([this, s] { return run_replica_process(s, service_.port, dir_); }));
      pids_.push_back(out.back());
    }
    return out;
  }
  std::string file(const std::string& name) { return slurp(dir_ / name); }

  fs::path dir_;
  Service service_;
  std::vector<pid_t> pids_;
};

TEST_P(ReplicaGroups, AReplicaLosingAProcessStopsTheOtherGoesOnAndItRejoinsAsOne) {
  const std::vector<pid_t> a = start("A");
  const std::vector<pid_t> b = start("B", {{4, Fault::kKillBeforeAllReduce}});
  // B's process 1 dies in step 4; its partner stops naming why.
  EXPECT_EQ(wait_exit(b[1], 60s), 128 + SIGKILL);
  EXPECT_EQ(wait_exit(b[0], 60s), 3) << file("B.0.log");
  // Its collective inside the replica (ZeRO's) or the manager's names the loss.
  const std::string err = file("B.0.err");
  EXPECT_TRUE(err.find("'ft-replica-B'") != std::string::npos ||
              err.find("this replica lost a process") != std::string::npos)
      << err;
  // Once A went on alone, B's processes restarted together, other initial weights.
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (file("A.0.log").find("lost [B]") == std::string::npos &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  const std::vector<pid_t> b2 = start("B", {}, /*replacement=*/true, /*seed=*/99);
  for (pid_t p : {a[0], a[1], b2[0], b2[1]}) EXPECT_EQ(wait_exit(p, 90s), 0) << file("A.0.log");
  const Committed c = expect_consistent(dir_, {"A.0", "A.1", "B.0", "B.1"}, 30);
  EXPECT_EQ(c.participants.front(), 2);
  EXPECT_NE(std::find(c.participants.begin(), c.participants.end(), 1), c.participants.end());
  EXPECT_EQ(c.participants.back(), 2) << "B did not rejoin";
  const std::string log = file("A.0.log");
  EXPECT_NE(log.find("lost [B]"), std::string::npos) << log;
  EXPECT_NE(log.find("joined [B]"), std::string::npos) << log;
  EXPECT_NE(file("B.1.log").find("received the state of step"), std::string::npos);
  EXPECT_NE(file("B.0.log").find("received the state of step"), std::string::npos);
}

TEST_P(ReplicaGroups, AStoppedProcessDropsItsReplicaByTheDeadline) {
  const std::vector<pid_t> a = start("A");
  const std::vector<pid_t> b = start("B", {{3, Fault::kStop}});
  EXPECT_EQ(wait_exit(b[0], 60s), 3) << file("B.0.log");
  EXPECT_EQ(wait_exit(a[0], 90s), 0) << file("A.0.log");
  EXPECT_EQ(wait_exit(a[1], 90s), 0) << file("A.1.log");
  const Committed c = expect_consistent(dir_, {"A.0", "A.1"}, 30);
  EXPECT_EQ(c.participants[2], 2);
  EXPECT_EQ(c.participants.back(), 1);
  ::kill(b[1], SIGKILL);
}

// 0: DDP over the replica's processes (its own average, then the replicas');
// -1: a tensor-parallel group as one replica (every process the same batch);
// -2: a pipeline of two stages as one replica.
INSTANTIATE_TEST_SUITE_P(Strategies, ReplicaGroups, ::testing::Values(0, 2, 3, -1, -2),
                         [](const auto& i) {
                           return i.param == 0    ? std::string("Ddp")
                                  : i.param == -1 ? std::string("TensorParallel")
                                  : i.param == -2 ? std::string("Pipeline")
                                                  : fmt::format("ZeroStage{}", i.param);
                         });

}  // namespace
}  // namespace cohort::parallel
