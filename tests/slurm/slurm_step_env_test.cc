// `cohort train` started as srun starts a job step's tasks, without Slurm:
// each process gets the variables srun sets (SLURM_STEP_ID, SLURM_PROCID,
// SLURM_STEP_NODELIST, SLURM_JOB_ID, SLURM_CPUS_PER_TASK, ...) and nothing
// else, and must find its rank, the master, the port and its threads from
// them (docs/slurm.md). slurm_cluster_test.sh runs the same under real Slurm
// daemons where they can start.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/rendezvous/slurm.h"
#include "tests/train/process_util.h"

extern char** environ;

namespace cohort::test {
namespace {

using namespace std::chrono_literals;

const std::string kCohort = COHORT_BIN;

// Clears what a caller (or a real Slurm job around the test) may have set, so
// that the processes see only the variables each test gives them.
class SlurmStepEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> names;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      std::string name = kv.substr(0, kv.find('='));
      for (const char* prefix : {"SLURM", "COHORT_", "OMPI_", "MASTER_", "PMI_", "PMIX_"}) {
        if (name.rfind(prefix, 0) == 0) names.push_back(name);
      }
      for (const char* exact : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                "GROUP_RANK", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
        if (name == exact) names.push_back(name);
      }
    }
    for (const auto& name : names) ::unsetenv(name.c_str());
  }
};

std::vector<std::string> train(std::vector<std::string> extra) {
  std::vector<std::string> argv = {kCohort,
                                   "train",
                                   "--model",
                                   "net",
                                   "--dataset",
                                   "synthetic",
                                   "--synthetic-train-size",
                                   "256",
                                   "--synthetic-test-size",
                                   "64",
                                   "--epochs",
                                   "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<std::string> as_env(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> env;
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

// A port that is free now and that SLURM_JOB_ID can give (10000..59999).
uint16_t free_derivable_port() {
  for (int i = 0; i < 1000; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(fd);
    if (port >= 10000 && port <= 59999) return port;
  }
  ADD_FAILURE() << "no free port in 10000..59999 after 1000 tries";
  return 0;
}

TEST_F(SlurmStepEnv, TwoTasksTrainDdpWithMasterPortAndThreadsFromSlurm) {
  const uint16_t port = free_derivable_port();
  ASSERT_NE(port, 0);
  const int64_t job = 50000 + (port - 10000);  // port_for_job(job) == port
  ASSERT_EQ(rendezvous::slurm::port_for_job(job), port);
  std::vector<std::unique_ptr<Background>> tasks;
  for (int rank = 0; rank < 2; ++rank) {
    tasks.push_back(std::make_unique<Background>(train({"--max-steps", "3"}),
                                                 as_env({{"SLURM_STEP_ID", "0"},
                                                         {"SLURM_JOB_ID", std::to_string(job)},
                                                         {"SLURM_PROCID", std::to_string(rank)},
                                                         {"SLURM_NTASKS", "2"},
                                                         {"SLURM_LOCALID", std::to_string(rank)},
                                                         {"SLURM_NODEID", "0"},
                                                         {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                                         {"SLURM_STEP_NODELIST", "localhost"},
                                                         {"SLURM_JOB_NODELIST", "localhost"},
                                                         {"SLURMD_NODENAME", "localhost"},
                                                         {"SLURM_CPUS_PER_TASK", "1"},
                                                         {"SLURM_CPUS_ON_NODE", "2"}})));
  }
  for (int rank = 0; rank < 2; ++rank) {
    int code = tasks[rank]->wait(240s);
    EXPECT_EQ(code, 0) << "rank " << rank << ":\n" << tasks[rank]->output();
  }
  std::string out = tasks[0]->output();
  EXPECT_NE(out.find("DDP, 2 ranks x 1 threads"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 1"), std::string::npos) << out;
}

TEST_F(SlurmStepEnv, ThreadsSplitTheNodesCpusWithoutCpusPerTask) {
  // One task of a step that has 3 on this node, on a node where the job has
  // 3 x (cores + 1) CPUs: cores + 1 threads each, a count no default gives.
  const int cpus = static_cast<int>(std::thread::hardware_concurrency()) + 1;
  Finished f = run_command(train({"--max-steps", "1", "--strategy", "single"}),
                           as_env({{"SLURM_STEP_ID", "0"},
                                   {"SLURM_JOB_ID", "5"},
                                   {"SLURM_PROCID", "0"},
                                   {"SLURM_NTASKS", "3"},
                                   {"SLURM_NODEID", "1"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "1,3"},
                                   {"SLURM_CPUS_ON_NODE", std::to_string(3 * cpus)}}),
                           240s);
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("1 process, " + std::to_string(cpus) + " threads"), std::string::npos)
      << f.output;
  // --threads and COHORT_NUM_THREADS still win.
  f = run_command(train({"--max-steps", "1", "--strategy", "single", "--threads", "1"}),
                  as_env({{"SLURM_STEP_ID", "0"}, {"SLURM_CPUS_PER_TASK", "4"}}), 240s);
  EXPECT_NE(f.output.find("1 process, 1 threads"), std::string::npos) << f.output;
  f = run_command(
      train({"--max-steps", "1", "--strategy", "single"}),
      as_env({{"SLURM_STEP_ID", "0"}, {"SLURM_CPUS_PER_TASK", "4"}, {"COHORT_NUM_THREADS", "1"}}),
      240s);
  EXPECT_NE(f.output.find("1 process, 1 threads"), std::string::npos) << f.output;
}

TEST_F(SlurmStepEnv, BatchScriptWithoutAStepTrainsInOneProcess) {
  // What a batch script of `#SBATCH -n 2 -c 1` sees: SLURM_PROCID=0 and the
  // job's SLURM_NTASKS=2, but no SLURM_STEP_ID: `cohort train` run there
  // directly is one process, not rank 0 of 2 waiting for a rank 1.
  Finished f = run_command(train({"--max-steps", "1"}),
                           as_env({{"SLURM_JOB_ID", "9"},
                                   {"SLURM_PROCID", "0"},
                                   {"SLURM_NTASKS", "2"},
                                   {"SLURM_LOCALID", "0"},
                                   {"SLURM_CPUS_PER_TASK", "1"},
                                   {"SLURM_JOB_NODELIST", "localhost"}}),
                           240s);
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("1 process, "), std::string::npos) << f.output;
}

TEST_F(SlurmStepEnv, MalformedNodeListFailsNamingIt) {
  Finished f = run_command(train({"--max-steps", "1"}),
                           as_env({{"SLURM_STEP_ID", "0"},
                                   {"SLURM_JOB_ID", "5"},
                                   {"SLURM_PROCID", "1"},
                                   {"SLURM_NTASKS", "2"},
                                   {"SLURM_STEP_NODELIST", "node[01-02"},
                                   {"SLURM_CPUS_PER_TASK", "1"}}),
                           240s);
  EXPECT_NE(f.exit_code, 0) << f.output;
  EXPECT_NE(f.output.find("SLURM_STEP_NODELIST"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("node[01-02"), std::string::npos) << f.output;
  EXPECT_NE(f.output.find("unclosed '['"), std::string::npos) << f.output;
}

}  // namespace
}  // namespace cohort::test
