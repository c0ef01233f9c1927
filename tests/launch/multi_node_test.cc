// Multi-node `cohort run`: two launchers on this host act as nodes 0 and 1 of
// one job (--nnodes 2, the same --master-port and COHORT_TOKEN) over
// tests/launch/test_worker.cc. They check that the nodes join and restart
// together, that a failure, an interruption or the loss of node 0 anywhere
// ends every node naming the cause, and that a node that never joins or
// cannot reach the store is named. Every run has a watchdog (cohort_run.h),
// so a launcher that hangs fails the test. The same on two network
// namespaces is tests/multihost/.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cohort/transport/socket.h"
#include "tests/launch/cohort_run.h"

namespace {

using namespace cohort_launch_test;

uint16_t free_port() {
  uint16_t port = 0;
  cohort::UniqueFd probe = cohort::transport::listen_tcp("127.0.0.1", 0, &port);
  return port;
}

ChildSpec node_spec(int node, uint16_t port, std::vector<std::string> launcher_extra,
                    std::vector<std::string> worker, int nproc = 1) {
  ChildSpec spec;
  spec.argv = {COHORT_BIN,      "run",       "--nproc-per-node", std::to_string(nproc),
               "--nnodes",      "2",         "--node-rank",      std::to_string(node),
               "--master-addr", "127.0.0.1", "--master-port",    std::to_string(port)};
  spec.argv.insert(spec.argv.end(), launcher_extra.begin(), launcher_extra.end());
  spec.argv.push_back("--");
  spec.argv.push_back(COHORT_TEST_WORKER);
  spec.argv.insert(spec.argv.end(), worker.begin(), worker.end());
  spec.env = environment_with({{"COHORT_TOKEN", "two-node-secret"}});
  spec.capture_output = true;
  return spec;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Every worker (their pids written to dir by the test worker) has exited.
void expect_workers_gone(const std::filesystem::path& dir, int world_size = 2) {
  for (int rank = 0; rank < world_size; ++rank) {
    pid_t pid = -1;
    std::ifstream(dir / ("pid" + std::to_string(rank))) >> pid;
    ASSERT_GT(pid, 0) << "rank " << rank;
    EXPECT_TRUE(process_gone(pid))
        << "rank " << rank << "'s worker (pid " << pid << ") outlived the job";
  }
}

TEST(LaunchMultiNode, WorkerFailingOnNode1StopsBothNodesNamingIt) {
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {}, {"fail", "1", "3"}));
  CohortRun n1(node_spec(1, port, {}, {"fail", "1", "3"}));
  RunResult r1 = n1.finish(60s), r0 = n0.finish(60s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  EXPECT_FALSE(r0.status.success()) << r0.err;
  EXPECT_EQ(r1.status.code, 3) << r1.err;
  for (const RunResult* r : {&r0, &r1}) {
    EXPECT_TRUE(contains(r->err, "cohort run: job failed: rank 1 (local rank 0 on node 1, pid"))
        << r->err;
  }
  EXPECT_TRUE(contains(r0.err, "stopping the workers on this node")) << r0.err;
}

TEST(LaunchMultiNode, FailureAnywhereRestartsTheWholeJobTogether) {
  auto dir = temp_dir("multinode_restart");
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {"--max-restarts", "1"}, {"resume", dir.string()}));
  CohortRun n1(node_spec(1, port, {"--max-restarts", "1"}, {"resume", dir.string()}));
  RunResult r0 = n0.finish(60s), r1 = n1.finish(60s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  EXPECT_TRUE(r0.status.success() && r1.status.success()) << r0.out << r0.err << r1.out << r1.err;
  EXPECT_TRUE(contains(r1.out, "[rank 1] dying at step 7")) << r1.out;
  for (const RunResult* r : {&r0, &r1}) {
    EXPECT_TRUE(contains(r->err,
                         "restarting the job on every node (restart 1 of 1) after: rank 1 "
                         "(local rank 0 on node 1"))
        << r->err;
  }
  // Both nodes' workers start attempt 1 (COHORT_RESTART_COUNT=1) from the checkpoint.
  EXPECT_TRUE(contains(r0.out, "[rank 0] attempt 1 resumes at step 5")) << r0.out;
  EXPECT_TRUE(contains(r1.out, "[rank 1] attempt 1 resumes at step 5")) << r1.out;
  EXPECT_TRUE(contains(r0.out, "[rank 0] finished at step 10")) << r0.out;
  std::filesystem::remove_all(dir);
}

TEST(LaunchMultiNode, NodeWhoseWorkersEndedWellRestartsWhenAnotherNodeFailsLater) {
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {"--max-restarts", "1"}, {"late-fail"}));
  CohortRun n1(node_spec(1, port, {"--max-restarts", "1"}, {"late-fail"}));
  RunResult r0 = n0.finish(60s), r1 = n1.finish(60s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  EXPECT_TRUE(r0.status.success() && r1.status.success()) << r0.out << r0.err << r1.out << r1.err;
  EXPECT_TRUE(contains(r1.out, "[rank 1] failing late")) << r1.out;
  // Node 0's worker had ended well; node 0 still restarts with node 1.
  EXPECT_TRUE(contains(r0.err,
                       "restarting the job on every node (restart 1 of 1) after: rank 1 "
                       "(local rank 0 on node 1"))
      << r0.err;
  EXPECT_TRUE(contains(r0.out, "[rank 0] attempt 1 rank 0")) << r0.out;
  EXPECT_TRUE(contains(r1.out, "[rank 1] attempt 1 rank 1")) << r1.out;
}

TEST(LaunchMultiNode, NodeWhoseWorkersEndedWellFailsWhenAnotherNodeFailsLater) {
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {}, {"late-fail"}));
  CohortRun n1(node_spec(1, port, {}, {"late-fail"}));
  RunResult r0 = n0.finish(60s), r1 = n1.finish(60s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  EXPECT_FALSE(r0.status.success()) << r0.err;
  EXPECT_EQ(r1.status.code, 3) << r1.err;
  for (const RunResult* r : {&r0, &r1}) {
    EXPECT_TRUE(contains(r->err, "cohort run: job failed: rank 1 (local rank 0 on node 1, pid"))
        << r->err;
  }
}

TEST(LaunchMultiNode, SpentRestartsFailEveryNode) {
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {"--max-restarts", "1"}, {"fail", "1", "3"}));
  CohortRun n1(node_spec(1, port, {"--max-restarts", "1"}, {"fail", "1", "3"}));
  RunResult r0 = n0.finish(60s), r1 = n1.finish(60s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  EXPECT_FALSE(r0.status.success());
  EXPECT_FALSE(r1.status.success());
  for (const RunResult* r : {&r0, &r1}) {
    EXPECT_TRUE(contains(r->err, "job failed: rank 1 (local rank 0 on node 1, pid")) << r->err;
    EXPECT_TRUE(contains(r->err, "(after 1 restart)")) << r->err;
  }
}

TEST(LaunchMultiNode, NodeThatNeverJoinsIsReportedWhileWaitingThenNamed) {
  const uint16_t port = free_port();
  RunResult r0 = CohortRun(node_spec(0, port, {"--join-timeout", "6"}, {"env"})).finish(60s);
  ASSERT_FALSE(r0.hung) << r0.err;
  EXPECT_FALSE(r0.status.success());
  EXPECT_TRUE(contains(r0.err,
                       "cohort run: node 0 waiting for node(s) 1 of 2 to join (store "
                       "127.0.0.1:" +
                           std::to_string(port) + "), "))
      << r0.err;
  EXPECT_TRUE(contains(r0.err,
                       "job failed: node 0: node(s) 1 of 2 never joined within "
                       "--join-timeout (6 s)"))
      << r0.err;
}

TEST(LaunchMultiNode, NodeThatCannotReachTheStoreSaysWhatItTriesThenFails) {
  const uint16_t port = free_port();  // nobody serves it
  RunResult r1 = CohortRun(node_spec(1, port, {"--connect-timeout", "6"}, {"env"})).finish(60s);
  ASSERT_FALSE(r1.hung) << r1.err;
  EXPECT_FALSE(r1.status.success());
  const std::string store = "127.0.0.1:" + std::to_string(port);
  EXPECT_TRUE(contains(r1.err, "still trying to reach the store at " + store)) << r1.err;
  EXPECT_TRUE(contains(r1.err, "job failed: node 1 could not reach the job's store at " + store +
                                   " (node 0) within --connect-timeout (6 s)"))
      << r1.err;
}

TEST(LaunchMultiNode, LosingNode0StopsNode1AndLeavesNoWorkers) {
  auto dir = temp_dir("multinode_lost_store");
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {}, {"wait-term", dir.string()}));
  CohortRun n1(node_spec(1, port, {}, {"wait-term", dir.string()}));
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1"}));
  ::kill(n0.pid(), SIGKILL);  // node 0's launcher dies without a word
  RunResult r1 = n1.finish(30s);
  n0.finish(5s);
  ASSERT_FALSE(r1.hung) << r1.err;
  EXPECT_FALSE(r1.status.success());
  // Named as what it is, the launcher, by node and pid; not as the store it served.
  EXPECT_TRUE(contains(
      r1.err, "job failed: node 0's launcher (pid " + std::to_string(n0.pid()) + " on host "))
      << r1.err;
  EXPECT_TRUE(contains(r1.err, "died: its link to node 1 closed without a goodbye")) << r1.err;
  EXPECT_TRUE(contains(r1.err, "stopping the workers on this node")) << r1.err;
  // Node 1's worker was stopped by its launcher; node 0's went with its
  // launcher (PDEATHSIG).
  expect_workers_gone(dir);
  std::filesystem::remove_all(dir);
}

// Node 1's launcher dies without a word, with a restart left: its worker goes
// with it (PDEATHSIG), node 0 sees the launcher's link close, stops its own
// worker and fails naming node 1's launcher, without restarting (a dead
// launcher cannot come back).
void expect_lost_launcher_of_node1_ends_the_job(std::vector<std::string> launcher_extra) {
  auto dir = temp_dir("multinode_lost_launcher");
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, launcher_extra, {"wait-term", dir.string()}));
  CohortRun n1(node_spec(1, port, launcher_extra, {"wait-term", dir.string()}));
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1"}));
  const pid_t victim = n1.pid();
  ::kill(victim, SIGKILL);
  RunResult r0 = n0.finish(30s), r1 = n1.finish(5s);
  ASSERT_FALSE(r0.hung) << r0.err;
  EXPECT_EQ(r1.status.signal, SIGKILL);
  EXPECT_EQ(r0.status.code, 1) << r0.status.describe() << r0.err;
  EXPECT_TRUE(contains(r0.err, "cohort run: job failed: node 1's launcher (pid " +
                                   std::to_string(victim) + " on host "))
      << r0.err;
  EXPECT_TRUE(contains(r0.err, "died: its link to node 0 closed without a goodbye")) << r0.err;
  EXPECT_FALSE(contains(r0.err, "restarting")) << r0.err;
  EXPECT_FALSE(contains(r0.err, "exit barrier")) << r0.err;
  // Node 0's worker was stopped by its launcher (SIGTERM: it wrote term0);
  // node 1's went with its launcher.
  EXPECT_TRUE(std::filesystem::exists(dir / "term0")) << r0.err;
  expect_workers_gone(dir);
  std::filesystem::remove_all(dir);
}

TEST(LaunchMultiNode, KilledLauncherOfNode1EndsEveryNodeNamingIt) {
  expect_lost_launcher_of_node1_ends_the_job({});
}

TEST(LaunchMultiNode, KilledLauncherIsNotRestartedEvenWithRestartsLeft) {
  expect_lost_launcher_of_node1_ends_the_job({"--max-restarts", "2"});
}

// Two workers per node and one node's launcher killed: the other node sees
// its link close and ends the job at once, naming it, without waiting out
// the 2 s in which a signal death elsewhere would still be named instead
// (issue 34: it took 1.2-2.0 s).
void expect_killed_launcher_ends_the_job_at_once(int victim_node) {
  auto dir = temp_dir("multinode_killed_launcher" + std::to_string(victim_node));
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {"--max-restarts", "1"}, {"wait-term", dir.string()}, 2));
  CohortRun n1(node_spec(1, port, {"--max-restarts", "1"}, {"wait-term", dir.string()}, 2));
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1", dir / "ready2", dir / "ready3"}));
  CohortRun& victim = victim_node == 0 ? n0 : n1;
  CohortRun& survivor = victim_node == 0 ? n1 : n0;
  const pid_t victim_pid = victim.pid();
  const auto killed_at = Clock::now();
  ::kill(victim_pid, SIGKILL);
  RunResult r = survivor.finish(30s);
  const double took = std::chrono::duration<double>(Clock::now() - killed_at).count();
  victim.finish(5s);
  ASSERT_FALSE(r.hung) << r.err;
  EXPECT_EQ(r.status.code, 1) << r.status.describe() << r.err;
  EXPECT_TRUE(contains(r.err, "cohort run: job failed: node " + std::to_string(victim_node) +
                                  "'s launcher (pid " + std::to_string(victim_pid) + " on host "))
      << r.err;
  EXPECT_FALSE(contains(r.err, "restarting")) << r.err;
  // Under the 2 s cause window the defect waited out; bench_chaos measures
  // the time itself (0.5 s target), which a loaded host must not fail here.
  EXPECT_LT(took, 1.5) << "the surviving node took " << took << " s to end the job\n" << r.err;
  expect_workers_gone(dir, 4);
  std::filesystem::remove_all(dir);
}

TEST(LaunchMultiNode, KilledLauncherOfNode1EndsTheJobAtOnce) {
  expect_killed_launcher_ends_the_job_at_once(1);
}

TEST(LaunchMultiNode, KilledLauncherOfNode0EndsTheJobAtOnce) {
  expect_killed_launcher_ends_the_job_at_once(0);
}

TEST(LaunchMultiNode, InterruptedNodeEndsTheJobOnEveryNodeWithoutRestart) {
  auto dir = temp_dir("multinode_interrupt");
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {"--max-restarts", "2"}, {"wait-term", dir.string()}));
  CohortRun n1(node_spec(1, port, {"--max-restarts", "2"}, {"wait-term", dir.string()}));
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1"}));
  ::kill(n1.pid(), SIGTERM);
  RunResult r1 = n1.finish(30s), r0 = n0.finish(30s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  EXPECT_EQ(r1.status.code, 128 + SIGTERM) << r1.err;
  EXPECT_FALSE(r0.status.success()) << r0.err;
  EXPECT_TRUE(contains(r0.err, "job failed: node 1's cohort run was stopped by SIGTERM")) << r0.err;
  EXPECT_FALSE(contains(r0.err, "restarting")) << r0.err;
  std::filesystem::remove_all(dir);
}

TEST(LaunchMultiNode, SigintWhileWaitingForNodesEndsTheLauncher) {
  const uint16_t port = free_port();
  CohortRun n0(node_spec(0, port, {"--join-timeout", "120"}, {"env"}));
  std::this_thread::sleep_for(1s);  // inside the join, or still starting: both must end
  ::kill(n0.pid(), SIGINT);
  RunResult r0 = n0.finish(30s);
  ASSERT_FALSE(r0.hung) << r0.err;
  EXPECT_TRUE(r0.status.code == 128 + SIGINT || r0.status.signal == SIGINT)
      << r0.status.describe() << r0.err;
}

}  // namespace
