// ReplicaManager over two hosts (network namespaces, tests/multihost/two_hosts.h):
// the quorum service and two replicas on host 0, two replicas on host 1,
// their groups over the veth link. A replica on host 1 is SIGKILLed mid-step
// and replaced there; then rank 0 itself, on host 0. The survivors go on, the
// replacements catch up from a live peer, and all end bit-identical and equal
// to one process replaying the committed steps. Skipped, saying why, without
// root or `ip`. The processes run this program in a mode of its own
// (--ft-service, --ft-replica) inside the namespaces.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/fault_tolerance/replica_harness.h"
#include "tests/multihost/two_hosts.h"

namespace cohort::parallel::ft_testing {
namespace {

using namespace std::chrono_literals;

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

pid_t exec_in(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  ::_exit(127);
}

class TwoHostReplicas : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = test::TwoHosts::unavailable()) GTEST_SKIP() << *why;
    hosts_ = std::make_unique<test::TwoHosts>();
    dir_ = fs::temp_directory_path() / fmt::format("cohort_ft2_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    service_ = exec_in(
        hosts_->in(0, {self_exe(), "--ft-service", hosts_->ip(0), (dir_ / "port").string()}));
    for (int i = 0; i < 500 && !fs::exists(dir_ / "port"); ++i) std::this_thread::sleep_for(10ms);
    port_ = static_cast<uint16_t>(std::stoi(slurp(dir_ / "port")));
  }
  void TearDown() override {
    if (service_ > 0) {
      ::kill(service_, SIGKILL);
      ::waitpid(service_, nullptr, 0);
    }
    hosts_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // Replica `id` on `host`: seed, initial replicas, the step r0 or r3 dies at (-1: none).
  pid_t start(int host, const std::string& id, uint64_t seed, int initial, int64_t kill_at) {
    return exec_in(hosts_->in(
        host, {self_exe(), "--ft-replica", id, hosts_->ip(0), std::to_string(port_), dir_.string(),
               std::to_string(seed), std::to_string(initial), std::to_string(kill_at)}));
  }

  std::unique_ptr<test::TwoHosts> hosts_;
  fs::path dir_;
  pid_t service_ = -1;
  uint16_t port_ = 0;
};

TEST_F(TwoHostReplicas, SurvivorsOnBothHostsGoOnAndReplacementsCatchUp) {
  std::vector<pid_t> pids = {start(0, "r0", 7, 4, 12), start(0, "r1", 7, 4, -1),
                             start(1, "r2", 7, 4, -1), start(1, "r3", 7, 4, 4)};
  // r3 (host 1) dies at step 4 and comes back on host 1.
  EXPECT_EQ(wait_exit(pids[3], 60s), 128 + SIGKILL);
  std::this_thread::sleep_for(100ms);
  pids[3] = start(1, "r3", 99, 0, -1);
  // r0 (host 0, rank 0) dies at step 12 and comes back on host 0.
  EXPECT_EQ(wait_exit(pids[0], 60s), 128 + SIGKILL);
  std::this_thread::sleep_for(100ms);
  pids[0] = start(0, "r0", 98, 0, -1);
  for (size_t r = 0; r < pids.size(); ++r)
    EXPECT_EQ(wait_exit(pids[r], 90s), 0)
        << slurp(dir_ / fmt::format("r{}.log", r)) << slurp(dir_ / fmt::format("r{}.err", r));
  expect_consistent(dir_, {"r0", "r1", "r2", "r3"}, 40);
  EXPECT_NE(slurp(dir_ / "r3.log").find("received the state of step"), std::string::npos);
  EXPECT_NE(slurp(dir_ / "r0.log").find("received the state of step"), std::string::npos);
}

}  // namespace
}  // namespace cohort::parallel::ft_testing

int main(int argc, char** argv) {
  using namespace cohort::parallel::ft_testing;
  const std::vector<std::string> a(argv, argv + argc);
  try {
    if (a.size() == 4 && a[1] == "--ft-service") return serve_forever(a[2], a[3]);
    if (a.size() == 9 && a[1] == "--ft-replica") {
      ReplicaSpec s{.id = a[2],
                    .seed = std::stoull(a[6]),
                    .steps = 40,
                    .initial_replicas = std::stoi(a[7]),
                    .step_time = std::chrono::milliseconds(10),
                    .tcp = true,
                    .store_host = a[3]};
      if (std::stoll(a[8]) >= 0) s.faults[std::stoll(a[8])] = Fault::kKillBeforeAllReduce;
      return run_replica(s, static_cast<uint16_t>(std::stoi(a[4])), a[5]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 3;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
