// End-to-end tests of `cohort run` (and cohort::spawn): each runs the real
// cohort binary over tests/launch/test_worker.cc and checks what it printed
// and how it ended. A run that does not end within its watchdog is killed and
// reported as a hang.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cohort/launch/child_process.h"
#include "cohort/launch/cpu_split.h"
#include "cohort/transport/socket.h"
#include "tests/launch/cohort_run.h"

namespace {

using namespace cohort_launch_test;

TEST(LaunchE2E, EnvironmentIsSetForEveryWorker) {
  RunResult r = run_cohort({"run", "--nproc-per-node", "3", "--", COHORT_TEST_WORKER, "env"});
  ASSERT_FALSE(r.hung) << r.out << r.err;
  ASSERT_TRUE(r.status.success()) << r.status.describe() << "\n" << r.out << r.err;
  auto shares = cohort::launch::split_cpus(cohort::launch::allowed_cpus(), 3);
  std::set<int> ranks;
  std::string port;
  for (const auto& line : lines(r.out)) {
    std::smatch m;
    if (!std::regex_search(line, m,
                           std::regex(R"(^\[rank (\d+)\] RANK=(\d+) LOCAL_RANK=(\d+) )"
                                      R"(WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 )"
                                      R"(MASTER_ADDR=127.0.0.1 MASTER_PORT=(\d+) )"
                                      R"(TOKEN_LEN=32 COHORT_NUM_THREADS=(\d+) )"
                                      R"(OMP_NUM_THREADS=(\d+) OPENBLAS_NUM_THREADS=(\d+) )"
                                      R"(CPUS=(\d+) RESTART=0$)"))) {
      continue;
    }
    EXPECT_EQ(m[1], m[2]);  // the prefix names the worker's own rank
    EXPECT_EQ(m[2], m[3]);  // one node: RANK == LOCAL_RANK
    ranks.insert(std::stoi(m[2]));
    if (port.empty()) port = m[4];
    EXPECT_EQ(m[4], port);  // one store for all
    EXPECT_NE(port, "0");
    int threads = std::stoi(m[5]);
    EXPECT_EQ(m[6], m[5]);
    EXPECT_EQ(m[7], m[5]);
    EXPECT_EQ(std::stoi(m[8]), threads);  // pinned to exactly its share
    EXPECT_EQ(threads, static_cast<int>(shares[std::stoul(m[2])].size()));
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2})) << r.out;
  // The store worked: each rank read its neighbour's value.
  for (int rank = 0; rank < 3; ++rank) {
    std::string want = "[rank " + std::to_string(rank) + "] peer " +
                       std::to_string((rank + 1) % 3) + " says " +
                       std::to_string(((rank + 1) % 3) * 10);
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
}

TEST(LaunchE2E, OutputLinesArePrefixedAndStreamsKeptApart) {
  RunResult r = run_cohort({"run", "--nproc-per-node", "2", "--", COHORT_TEST_WORKER, "env"});
  ASSERT_TRUE(r.status.success()) << r.out << r.err;
  for (const auto& line : lines(r.out)) {
    if (line.empty()) continue;
    EXPECT_TRUE(std::regex_search(line, std::regex(R"(^\[rank [01]\] )"))) << line;
    EXPECT_EQ(line.find("stderr line"), std::string::npos) << "stderr text on stdout: " << line;
  }
  EXPECT_NE(r.err.find("[rank 0] stderr line from 0\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank 1] stderr line from 1\n"), std::string::npos) << r.err;
}

TEST(LaunchE2E, NoPinLeavesThreadCountsAlone) {
  RunResult r =
      run_cohort({"run", "--nproc-per-node", "2", "--no-pin", "--", COHORT_TEST_WORKER, "env"});
  ASSERT_TRUE(r.status.success()) << r.out << r.err;
  EXPECT_NE(r.out.find("COHORT_NUM_THREADS=<unset>"), std::string::npos) << r.out;
}

TEST(LaunchE2E, FailedWorkerStopsTheOthersWithSummary) {
  // Ranks 0, 2 and 3 sleep for minutes: the run only ends because they are stopped.
  RunResult r =
      run_cohort({"run", "--nproc-per-node", "4", "--", COHORT_TEST_WORKER, "fail", "2", "7"}, 30s);
  ASSERT_FALSE(r.hung) << "the launcher did not stop the other workers\n" << r.out << r.err;
  EXPECT_EQ(r.status.code, 7) << r.status.describe();
  EXPECT_NE(r.err.find("job failed: rank 2 (local rank 2 on node 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 7"), std::string::npos) << r.err;
}

TEST(LaunchE2E, MaxLostWorkersLetsTheOthersFinish) {
  RunResult r = run_cohort({"run", "--nproc-per-node", "3", "--max-lost-workers", "1", "--",
                            COHORT_TEST_WORKER, "lose", "1", "5"},
                           60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 0) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("rank 1 (local rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lost worker 1 of 1 tolerated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("job finished without 1 lost worker: rank 1 (exited with code 5)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("[rank 0] finished without the lost ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 2] finished without the lost ranks"), std::string::npos) << r.out;
}

TEST(LaunchE2E, LosingMoreWorkersThanToleratedEndsTheJob) {
  RunResult r = run_cohort({"run", "--nproc-per-node", "3", "--max-lost-workers", "1", "--",
                            COHORT_TEST_WORKER, "lose", "1,2", "6"},
                           60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 6) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("lost worker 1 of 1 tolerated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("job failed: rank 2"), std::string::npos) << r.err;
}

TEST(LaunchE2E, FaultTolerantRestartsAFailedWorkerInPlace) {
  // Rank 1 fails once; its replacement (COHORT_FT_REPLACEMENT=1) succeeds.
  RunResult r = run_cohort(
      {"run", "--nproc-per-node", "2", "--fault-tolerant", "--", "/bin/sh", "-c",
       "if [ \"$RANK\" = 1 ] && [ -z \"$COHORT_FT_REPLACEMENT\" ]; then exit 3; fi; sleep 1; "
       "echo done $RANK"},
      60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 0) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("restarting it into the running job (restart 1 of 3 for this worker)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("[rank 0] done 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] done 1"), std::string::npos) << r.out;
}

TEST(LaunchE2E, FaultTolerantReplicaOfTwoWorkersRestartsAsOne) {
  // Rank 3 fails once: its partner, rank 2, is stopped with it and both are
  // started again together; ranks 0 and 1 (the other replica) go on.
  RunResult r = run_cohort(
      {"run", "--nproc-per-node", "4", "--fault-tolerant", "--replica-size", "2", "--", "/bin/sh",
       "-c",
       "if [ \"$RANK\" = 3 ] && [ -z \"$COHORT_FT_REPLACEMENT\" ]; then exit 3; fi; sleep 2; "
       "echo done $RANK size $COHORT_FT_REPLICA_SIZE ${COHORT_FT_REPLACEMENT:-first}"},
      60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 0) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("its replica (local ranks 2-3) fails as one: stopping its other workers"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("restarting the replica of local ranks 2-3 into the running job, its 2 "
                       "workers together (restart 1 of 3 for this replica)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("[rank 0] done 0 size 2 first"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] done 1 size 2 first"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 2] done 2 size 2 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 3] done 3 size 2 1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 2] done 2 size 2 first"), std::string::npos) << r.out;
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--fault-tolerant", "--replica-size", "3"}, "--replica-size 3 must divide"},
           {{"--replica-size", "2"},
            "--replica-size 2 (workers that fail and restart as one "
            "replica) needs --fault-tolerant"}}) {
    std::vector<std::string> argv = {"run", "--nproc-per-node", "4"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--", "true"});
    RunResult bad = run_cohort(argv, 30s);
    EXPECT_NE(bad.status.code, 0);
    EXPECT_NE(bad.err.find(message), std::string::npos) << bad.err;
  }
}

TEST(LaunchE2E, FaultTolerantWorkerOutOfRestartsIsLostAndTheOthersFinish) {
  RunResult r = run_cohort(
      {"run", "--nproc-per-node", "2", "--fault-tolerant", "--max-worker-restarts", "1", "--",
       "/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 4; fi; sleep 1.5; echo done $RANK"},
      60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 0) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.err.find("restart 1 of 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no restarts left for it, the others go on"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("[rank 0] done 0"), std::string::npos) << r.out;
  RunResult bad = run_cohort(
      {"run", "--nproc-per-node", "2", "--fault-tolerant", "--max-restarts", "1", "--", "true"},
      30s);
  EXPECT_NE(bad.status.code, 0);
  EXPECT_NE(bad.err.find("--max-restarts and --max-lost-workers do not combine"), std::string::npos)
      << bad.err;
  RunResult elastic = run_cohort(
      {"run", "--nnodes", "1:2", "--master-port", "29999", "--nproc-per-node", "1", "--", "true"},
      30s);
  EXPECT_NE(elastic.status.code, 0);
  EXPECT_NE(elastic.err.find("--nnodes 1:2 (nodes joining and leaving a running job) needs "
                             "--fault-tolerant"),
            std::string::npos)
      << elastic.err;
  RunResult malformed = run_cohort({"run", "--nnodes", "2:x", "--", "true"}, 30s);
  EXPECT_NE(malformed.err.find("--nnodes must be N or MIN:MAX"), std::string::npos)
      << malformed.err;
}

TEST(LaunchE2E, CrashedWorkerIsNamedWithItsSignal) {
  RunResult r =
      run_cohort({"run", "--nproc-per-node", "2", "--", COHORT_TEST_WORKER, "crash", "1"}, 30s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 128 + SIGSEGV);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

TEST(LaunchE2E, WorkerKilledFromOutsideIsNamedOverThePeerItTookDown) {
  for (int attempt = 0; attempt < 3; ++attempt) {  // the reaping order varies; each must name 1
    RunResult r =
        run_cohort({"run", "--nproc-per-node", "2", "--", COHORT_TEST_WORKER, "kill-cascade"}, 30s);
    ASSERT_FALSE(r.hung) << r.out << r.err;
    EXPECT_EQ(r.status.code, 128 + SIGKILL) << r.err;
    EXPECT_NE(r.err.find("job failed: rank 1"), std::string::npos) << r.err;
  }
}

TEST(LaunchE2E, WorkerIgnoringSigtermIsKilledAfterGrace) {
  RunResult r = run_cohort({"run", "--nproc-per-node", "2", "--grace-period", "1", "--",
                            COHORT_TEST_WORKER, "stubborn", "0"},
                           30s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 1);
  EXPECT_NE(r.err.find("job failed: rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 worker still running after the 1000 ms grace period; sending SIGKILL"),
            std::string::npos)
      << r.err;
}

void expect_signal_forwarded(int sig, const std::string& name) {
  auto dir = temp_dir(name);
  CohortRun run(
      {"run", "--nproc-per-node", "2", "--", COHORT_TEST_WORKER, "wait-term", dir.string()});
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1"})) << "workers did not start";
  ::kill(run.pid(), sig);
  RunResult r = run.finish(30s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 128 + sig) << r.status.describe() << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "term0")) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "term1")) << r.err;
  EXPECT_NE(r.err.find("got " + name), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

// SIGKILL to the launcher (nothing it can forward): its workers end with it.
TEST(LaunchE2E, KilledLauncherTakesItsWorkersWithIt) {
  auto dir = temp_dir("killed_launcher");
  CohortRun run(
      {"run", "--nproc-per-node", "2", "--", COHORT_TEST_WORKER, "wait-term", dir.string()});
  ASSERT_TRUE(wait_for_files({dir / "ready0", dir / "ready1"})) << "workers did not start";
  ::kill(run.pid(), SIGKILL);
  RunResult r = run.finish(30s);
  EXPECT_EQ(r.status.signal, SIGKILL);
  for (int rank : {0, 1}) {
    pid_t pid = -1;
    std::ifstream(dir / ("pid" + std::to_string(rank))) >> pid;
    ASSERT_GT(pid, 0) << "rank " << rank;
    EXPECT_TRUE(process_gone(pid))
        << "rank " << rank << "'s worker (pid " << pid << ") outlived its launcher";
    // Killed, not stopped: nothing forwarded a SIGTERM to it.
    EXPECT_FALSE(std::filesystem::exists(dir / ("term" + std::to_string(rank))));
  }
  std::filesystem::remove_all(dir);
}

TEST(LaunchE2E, SigtermIsForwardedToWorkers) { expect_signal_forwarded(SIGTERM, "SIGTERM"); }

TEST(LaunchE2E, SigintIsForwardedToWorkers) { expect_signal_forwarded(SIGINT, "SIGINT"); }

TEST(LaunchE2E, MaxRestartsRestartsTheGroupWhichResumes) {
  auto dir = temp_dir("restart");
  RunResult r = run_cohort({"run", "--nproc-per-node", "2", "--max-restarts", "1", "--",
                            COHORT_TEST_WORKER, "resume", dir.string()},
                           60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_TRUE(r.status.success()) << r.status.describe() << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 1] dying at step 7"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("restarting the group (restart 1 of 1)"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("[rank 0] attempt 1 resumes at step 5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] attempt 1 resumes at step 5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] finished at step 10"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(LaunchE2E, WithoutRestartsTheFailureEndsTheJob) {
  auto dir = temp_dir("norestart");
  RunResult r = run_cohort(
      {"run", "--nproc-per-node", "2", "--", COHORT_TEST_WORKER, "resume", dir.string()}, 60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 3);
  EXPECT_EQ(r.out.find("attempt 1"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(LaunchE2E, SpawnPropagatesTheFailedRank) {
  // The worker program itself calls cohort::spawn (3 children, rank 2 throws).
  RunResult r = run_cohort({"run", "--", COHORT_TEST_WORKER, "spawn"}, 60s);
  ASSERT_FALSE(r.hung) << r.out << r.err;
  EXPECT_EQ(r.status.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("caught: spawn: rank 2 of 3 failed: rank two gives up"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(rank 2)"), std::string::npos) << r.out;
}

TEST(LaunchE2E, TwoNodesShareOneStoreAndNumberRanksByNode) {
  uint16_t port = 0;
  {  // a free port, released for node 0's store
    cohort::UniqueFd probe = cohort::transport::listen_tcp("127.0.0.1", 0, &port);
  }
  auto node = [&](int rank) {
    ChildSpec spec;
    spec.argv = {COHORT_BIN,
                 "run",
                 "--nproc-per-node",
                 "2",
                 "--nnodes",
                 "2",
                 "--node-rank",
                 std::to_string(rank),
                 "--master-addr",
                 "127.0.0.1",
                 "--master-port",
                 std::to_string(port),
                 "--",
                 COHORT_TEST_WORKER,
                 "env"};
    spec.env = environment_with({{"COHORT_TOKEN", "two-node-secret"}});
    spec.capture_output = true;
    return spec;
  };
  // Node 1 may start first: its workers retry connecting until node 0 serves.
  CohortRun n1(node(1));
  CohortRun n0(node(0));
  RunResult r0 = n0.finish(60s), r1 = n1.finish(60s);
  ASSERT_FALSE(r0.hung || r1.hung) << r0.err << r1.err;
  ASSERT_TRUE(r0.status.success() && r1.status.success()) << r0.out << r0.err << r1.out << r1.err;
  EXPECT_NE(
      r0.out.find("[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=0"),
      std::string::npos)
      << r0.out;
  EXPECT_NE(
      r1.out.find("[rank 3] RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1"),
      std::string::npos)
      << r1.out;
  // Rank 1 (node 0) read rank 2's value (node 1) through node 0's store.
  EXPECT_NE(r0.out.find("[rank 1] peer 2 says 20"), std::string::npos) << r0.out;
  EXPECT_NE(r1.out.find("[rank 3] peer 0 says 0"), std::string::npos) << r1.out;
}

TEST(LaunchE2E, ProgramArgumentsPassThroughWithoutSeparator) {
  // Like torchrun: the first non-option starts the program; its options stay its own.
  RunResult r = run_cohort(
      {"run", "--nproc-per-node", "1", "sh", "-c", "echo args:$0:$1", "x", "--nproc-per-node"});
  ASSERT_TRUE(r.status.success()) << r.out << r.err;
  EXPECT_EQ(r.out, "[rank 0] args:x:--nproc-per-node\n");
}

TEST(LaunchE2E, InterfaceAndConnectTimeoutReachTheWorkers) {
  RunResult r = run_cohort({"run", "--interface", "lo", "--connect-timeout", "7", "sh", "-c",
                            "echo net:$COHORT_SOCKET_IFNAME:$COHORT_CONNECT_TIMEOUT"});
  ASSERT_TRUE(r.status.success()) << r.out << r.err;
  EXPECT_EQ(r.out, "[rank 0] net:lo:7\n");
}

TEST(LaunchE2E, UnknownInterfaceFailsBeforeAnyWorkerStarts) {
  RunResult r = run_cohort({"run", "--interface", "nosuch0", "sh", "-c", "echo started"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("network interface 'nosuch0'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lo ("), std::string::npos) << r.err;  // names those there are
}

TEST(LaunchE2E, BadArgumentsAreReported) {
  RunResult r = run_cohort({"run", "--nproc-per-node", "0", "--", "true"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_NE(r.err.find("--nproc-per-node must be >= 1"), std::string::npos) << r.err;
  r = run_cohort({"run", "--nnodes", "2", "--node-rank", "1", "--", "true"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_NE(r.err.find("--master-port"), std::string::npos) << r.err;
  r = run_cohort({"run", "--", "/no/such/program"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_NE(r.err.find("cannot execute '/no/such/program'"), std::string::npos) << r.err;
}

}  // namespace
