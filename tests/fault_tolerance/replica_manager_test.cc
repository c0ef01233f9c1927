// ReplicaManager with real processes: a quorum service (a TCP store server)
// in a process of its own, and replicas that train a small MLP with SGD and
// momentum over a global sample order (each committed step takes the next
// n x B samples for its n participants, so none is lost or seen twice).
// Replicas are SIGKILLed mid-step (one, and two in one step), replaced by a
// process with other initial weights that receives the state from a live
// peer, and SIGSTOPped; the quorum service is killed. After each: no hang,
// the survivors' parameters bit-identical among themselves and equal to one
// process replaying the committed steps (1e-5), the steps counted once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "tests/fault_tolerance/replica_harness.h"

namespace cohort::parallel {
namespace {

using namespace ft_testing;

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class FaultTolerance : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_ft_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    service_ = start_service();
  }
  void TearDown() override {
    if (service_.pid > 0) {
      ::kill(service_.pid, SIGKILL);
      ::waitpid(service_.pid, nullptr, 0);
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }
  pid_t start(ReplicaSpec spec) {
    return fork_run([this, spec] { return run_replica(spec, service_.port, dir_); });
  }
  std::string log_of(const std::string& id) { return slurp(dir_ / (id + ".log")); }
  Committed expect_consistent(const std::vector<std::string>& ids, int64_t steps) {
    return ft_testing::expect_consistent(dir_, ids, steps);
  }

  fs::path dir_;
  Service service_;
};

TEST_F(FaultTolerance, SurvivorsGoOnWhenAReplicaIsKilledMidStep) {
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2"}) {
    ReplicaSpec s{.id = id, .initial_replicas = 3};
    if (s.id == "r2") s.faults[4] = Fault::kKillBeforeAllReduce;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[0], 60s), 0) << log_of("r0");
  EXPECT_EQ(wait_exit(pids[1], 60s), 0) << log_of("r1");
  EXPECT_EQ(wait_exit(pids[2], 60s), 128 + SIGKILL);
  const Committed c = expect_consistent({"r0", "r1"}, 10);
  EXPECT_EQ(c.participants, (std::vector<int>{3, 3, 3, 3, 2, 2, 2, 2, 2, 2}));
  EXPECT_NE(log_of("r0").find("lost [r2]"), std::string::npos) << log_of("r0");
}

TEST_F(FaultTolerance, SurvivorsGoOnOverTcpPairsAndAReplacementRejoins) {
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2"}) {
    ReplicaSpec s{.id = id, .steps = 40, .initial_replicas = 3, .step_time = 10ms, .tcp = true};
    if (s.id == "r0") s.faults[3] = Fault::kKillBeforeAllReduce;  // rank 0 itself
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[0], 60s), 128 + SIGKILL);
  std::this_thread::sleep_for(100ms);
  const pid_t replacement =
      start({.id = "r0", .seed = 99, .steps = 40, .step_time = 10ms, .tcp = true});
  EXPECT_EQ(wait_exit(pids[1], 60s), 0) << log_of("r1");
  EXPECT_EQ(wait_exit(pids[2], 60s), 0) << log_of("r2");
  EXPECT_EQ(wait_exit(replacement, 60s), 0) << log_of("r0");
  expect_consistent({"r0", "r1", "r2"}, 40);
  EXPECT_NE(log_of("r1").find("lost [r0]"), std::string::npos) << log_of("r1");
  EXPECT_NE(log_of("r0").find("received the state of step"), std::string::npos) << log_of("r0");
}

TEST_F(FaultTolerance, ReplicasKilledInForwardAndInTheOptimizerStep) {
  // r1 dies in step 2's forward; r2 in step 5's optimizer step, after the
  // step committed everywhere (the survivors keep it: five participants'
  // worth of samples, not redone).
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2", "r3"}) {
    ReplicaSpec s{.id = id, .steps = 8, .initial_replicas = 4};
    if (s.id == "r1") s.faults[2] = Fault::kKillInForward;
    if (s.id == "r2") s.faults[5] = Fault::kKillInOptimizerStep;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[0], 60s), 0) << log_of("r0");
  EXPECT_EQ(wait_exit(pids[3], 60s), 0) << log_of("r3");
  EXPECT_EQ(wait_exit(pids[1], 10s), 128 + SIGKILL);
  EXPECT_EQ(wait_exit(pids[2], 10s), 128 + SIGKILL);
  const Committed c = expect_consistent({"r0", "r3"}, 8);
  EXPECT_EQ(c.participants, (std::vector<int>{4, 4, 3, 3, 3, 3, 2, 2}));
}

TEST_F(FaultTolerance, TheSourceDyingWhileAReplacementWaitsForItsState) {
  // r2 dies; its replacement is behind; r0, the source of its state, dies
  // as it starts sending; r1 sends it at the next quorum.
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2"}) {
    ReplicaSpec s{.id = id, .steps = 40, .initial_replicas = 3, .step_time = 10ms};
    if (s.id == "r2") s.faults[3] = Fault::kKillBeforeAllReduce;
    if (s.id == "r0") s.faults[1000] = Fault::kKillWhenSendingState;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[2], 60s), 128 + SIGKILL);
  std::this_thread::sleep_for(100ms);
  const pid_t replacement = start({.id = "r2", .seed = 99, .steps = 40, .step_time = 10ms});
  EXPECT_EQ(wait_exit(pids[0], 60s), 128 + SIGKILL);
  EXPECT_EQ(wait_exit(pids[1], 60s), 0) << log_of("r1");
  EXPECT_EQ(wait_exit(replacement, 60s), 0) << log_of("r2");
  const Committed c = expect_consistent({"r1", "r2"}, 40);
  EXPECT_NE(log_of("r2").find("received the state of step"), std::string::npos) << log_of("r2");
  EXPECT_NE(log_of("r1").find("lost [r0]"), std::string::npos) << log_of("r1");
}

TEST_F(FaultTolerance, DistributedDataParallelThroughTheManagersHookGoesOnToo) {
  // DDP's buckets (several, overlapping backward) over the step's group.
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2"}) {
    ReplicaSpec s{.id = id, .initial_replicas = 3, .ddp = true};
    if (s.id == "r1") s.faults[4] = Fault::kKillBeforeAllReduce;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[0], 60s), 0) << log_of("r0");
  EXPECT_EQ(wait_exit(pids[2], 60s), 0) << log_of("r2");
  EXPECT_EQ(wait_exit(pids[1], 60s), 128 + SIGKILL);
  const Committed c = expect_consistent({"r0", "r2"}, 10);
  EXPECT_EQ(c.participants, (std::vector<int>{3, 3, 3, 3, 2, 2, 2, 2, 2, 2}));
}

TEST_F(FaultTolerance, TwoReplicasKilledInOneStep) {
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2", "r3"}) {
    ReplicaSpec s{.id = id, .steps = 8, .initial_replicas = 4};
    if (s.id == "r1" || s.id == "r3") s.faults[3] = Fault::kKillBeforeAllReduce;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[0], 60s), 0) << log_of("r0");
  EXPECT_EQ(wait_exit(pids[2], 60s), 0) << log_of("r2");
  wait_exit(pids[1], 10s);
  wait_exit(pids[3], 10s);
  const Committed c = expect_consistent({"r0", "r2"}, 8);
  EXPECT_EQ(c.participants, (std::vector<int>{4, 4, 4, 2, 2, 2, 2, 2}));
}

TEST_F(FaultTolerance, AReplacementReceivesThePeersStateAndTrainsOnBitIdentical) {
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2"}) {
    ReplicaSpec s{.id = id, .steps = 60, .initial_replicas = 3, .step_time = 10ms};
    if (s.id == "r2") s.faults[3] = Fault::kKillBeforeAllReduce;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[2], 60s), 128 + SIGKILL);
  // The replacement, a while later: the same id, other initial weights, step 0.
  std::this_thread::sleep_for(200ms);
  const pid_t replacement = start({.id = "r2", .seed = 99, .steps = 60, .step_time = 10ms});
  EXPECT_EQ(wait_exit(pids[0], 60s), 0) << log_of("r0");
  EXPECT_EQ(wait_exit(pids[1], 60s), 0) << log_of("r1");
  EXPECT_EQ(wait_exit(replacement, 60s), 0) << log_of("r2");
  const Committed c = expect_consistent({"r0", "r1", "r2"}, 60);
  EXPECT_NE(log_of("r2").find("received the state of step"), std::string::npos) << log_of("r2");
  EXPECT_NE(log_of("r0").find("joined [r2]"), std::string::npos) << log_of("r0");
  EXPECT_NE(log_of("r0").find("behind, to catch up [r2 at step 0]"), std::string::npos)
      << log_of("r0");
  // Three before the kill, two while r2 was gone, three again after.
  ASSERT_EQ(c.participants.size(), 60u);
  EXPECT_EQ(c.participants.front(), 3);
  EXPECT_EQ(c.participants.back(), 3);
  EXPECT_NE(std::find(c.participants.begin(), c.participants.end(), 2), c.participants.end());
}

TEST_F(FaultTolerance, AStoppedReplicaIsDroppedByTheStepDeadline) {
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1", "r2"}) {
    ReplicaSpec s{.id = id, .steps = 8, .initial_replicas = 3, .op_timeout = 1500ms};
    if (s.id == "r1") s.faults[2] = Fault::kStop;
    pids.push_back(start(s));
  }
  EXPECT_EQ(wait_exit(pids[0], 60s), 0) << log_of("r0");
  EXPECT_EQ(wait_exit(pids[2], 60s), 0) << log_of("r2");
  ::kill(pids[1], SIGKILL);
  wait_exit(pids[1], 10s);
  const Committed c = expect_consistent({"r0", "r2"}, 8);
  EXPECT_EQ(c.participants, (std::vector<int>{3, 3, 2, 2, 2, 2, 2, 2}));
  EXPECT_NE(log_of("r0").find("lost [r1]"), std::string::npos) << log_of("r0");
}

TEST_F(FaultTolerance, TheQuorumServiceDyingStopsEveryReplicaNamingIt) {
  std::vector<pid_t> pids;
  for (const char* id : {"r0", "r1"})
    pids.push_back(start({.id = id, .steps = 1'000'000, .initial_replicas = 2}));
  // Let them train a little, then kill the service.
  std::this_thread::sleep_for(500ms);
  ::kill(service_.pid, SIGKILL);
  ::waitpid(service_.pid, nullptr, 0);
  service_.pid = -1;
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(wait_exit(pids[r], 60s), 3);
    const std::string err = slurp(dir_ / fmt::format("r{}.err", r));
    EXPECT_NE(err.find("the quorum service (the TCP store's server at 127.0.0.1:"),
              std::string::npos)
        << err;
  }
}

TEST(ReplicaManager, RefusesBackendsThatCannotShrinkAGroup) {
  try {
    ReplicaManager m(
        {.replica_id = "r0", .store_port = 1, .backend = distributed::BackendKind::kMpi});
    ADD_FAILURE() << "mpi accepted";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("without ULFM"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort::parallel
