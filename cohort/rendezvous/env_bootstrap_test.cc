#include "cohort/rendezvous/env_bootstrap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/base/unique_fd.h"
#include "cohort/rendezvous/slurm.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/transport/socket.h"

namespace cohort::rendezvous {
namespace {

using namespace std::chrono_literals;

// Sets variables for one test and restores the previous values after it.
class EnvGuard {
 public:
  explicit EnvGuard(std::map<std::string, std::string> vars) {
    for (const char* name : {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID",
                             "SLURM_STEP_ID",
                             "SLURM_STEP_NODELIST",
                             "SLURM_JOB_NODELIST",
                             "SLURM_JOB_ID",
                             "SLURM_STEP_TASKS_PER_NODE",
                             "SLURM_TASKS_PER_NODE",
                             "SLURM_NODEID",
                             "SLURMD_NODENAME",
                             "COHORT_TOKEN",
                             "COHORT_STORE_HOSTED",
                             "COHORT_RESTART_COUNT",
                             "COHORT_ADDR",
                             "COHORT_SOCKET_IFNAME",
                             "COHORT_CONNECT_TIMEOUT",
                             "COHORT_FLIGHT_RECORDER_DIR",
                             "COHORT_LOG_LEVEL",
                             "COHORT_NUM_THREADS",
                             "COHORT_STORAGE_CACHE",
                             "COHORT_DEVICE_TIMEOUT_S",
                             "COHORT_CUDNN_ATTENTION",
                             "COHORT_SHM_RING_BYTES",
                             "COHORT_SHM_SINGLE_COPY"}) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
    for (auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (auto& [k, v] : saved_) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::string slurm_first(const std::string& nodelist) {
  try {
    return slurm::first_host(nodelist);
  } catch (const InvalidArgument&) {
    return "";  // the malformed lists of the tests below
  }
}

uint16_t free_port() {
  uint16_t port = 0;
  UniqueFd probe = transport::listen_tcp("127.0.0.1", 0, &port);
  return port;
}

TEST(ParseInitMethod, Forms) {
  auto t = parse_init_method("tcp://10.1.2.3:29500?rank=1&world_size=4");
  EXPECT_EQ(t.scheme, "tcp");
  EXPECT_EQ(t.host, "10.1.2.3");
  EXPECT_EQ(t.port, 29500);
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.world_size, 4);
  auto v6 = parse_init_method("tcp://[::1]:80");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 80);
  EXPECT_EQ(parse_init_method("file:///tmp/x").path, "/tmp/x");
  EXPECT_EQ(parse_init_method("env://").scheme, "env");
  EXPECT_THROW(parse_init_method("tcp://host"), InvalidArgument);
  EXPECT_THROW(parse_init_method("tcp://host:99999"), InvalidArgument);
  EXPECT_THROW(parse_init_method("udp://host:1"), InvalidArgument);
  EXPECT_THROW(parse_init_method("localhost:1"), InvalidArgument);
  EXPECT_THROW(parse_init_method("tcp://h:1?rank=x"), InvalidArgument);
  EXPECT_THROW(parse_init_method("tcp://h:1?color=1"), InvalidArgument);
}

TEST(Bootstrap, EnvMissingVariableIsNamed) {
  EnvGuard env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  try {
    bootstrap("env://");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RANK is not set"), std::string::npos) << e.what();
  }
  ::setenv("RANK", "0", 1);
  ::unsetenv("MASTER_ADDR");
  try {
    bootstrap("env://");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "http", 1);
  EXPECT_THROW(bootstrap("env://"), InvalidArgument);
  ::setenv("RANK", "2", 1);
  ::setenv("MASTER_PORT", "1", 1);
  EXPECT_THROW(bootstrap("env://"), InvalidArgument);  // rank >= world size
}

TEST(Bootstrap, EnvTwoRanksRankZeroServes) {
  uint16_t port = free_port();
  EnvGuard env({{"WORLD_SIZE", "2"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {"COHORT_TOKEN", "tok"}});
  BootstrapOptions o0, o1;
  o0.rank = 0;
  o1.rank = 1;
  o0.timeout = o1.timeout = 10s;
  BootstrapResult r1;
  std::thread t([&] { r1 = bootstrap("env://", o1); });  // may start before rank 0 serves
  BootstrapResult r0 = bootstrap("env://", o0);
  t.join();
  EXPECT_EQ(r0.world_size, 2);
  EXPECT_EQ(r1.rank, 1);
  EXPECT_EQ(r1.local_rank, 1);  // no LOCAL_RANK: one host assumed
  EXPECT_EQ(r1.local_world_size, 2);
  r1.store->set("hello", std::string("from 1"));
  EXPECT_EQ(r0.store->get_string("hello"), "from 1");
}

TEST(Bootstrap, OpenMpiAndSlurmFallbacks) {
  {
    EnvGuard env({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
    auto path =
        std::filesystem::temp_directory_path() / ("cohort_boot_" + std::to_string(::getpid()));
    auto r = bootstrap("file://" + path.string());
    EXPECT_EQ(r.rank, 0);
    EXPECT_EQ(r.world_size, 1);
    r.store->set("k", std::string("v"));
    std::filesystem::remove(path);
  }
  {
    EnvGuard env({{"SLURM_STEP_ID", "0"},
                  {"SLURM_PROCID", "3"},
                  {"SLURM_NTASKS", "8"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_STEP_TASKS_PER_NODE", "3,4(x2)"},
                  {"SLURM_NODEID", "1"}});
    auto path =
        std::filesystem::temp_directory_path() / ("cohort_boot2_" + std::to_string(::getpid()));
    auto r = bootstrap("file://" + path.string());
    EXPECT_EQ(r.rank, 3);
    EXPECT_EQ(r.world_size, 8);
    EXPECT_EQ(r.local_rank, 1);
    EXPECT_EQ(r.local_world_size, 4);
    std::filesystem::remove(path);
  }
}

TEST(Bootstrap, SlurmVariablesOutsideAJobStepAreNotThisProcesss) {
  // A batch script sees SLURM_PROCID=0 and the job's SLURM_NTASKS too, meant
  // for the steps it starts: without SLURM_STEP_ID they do not make a rank.
  EnvGuard env({{"SLURM_PROCID", "0"},
                {"SLURM_NTASKS", "2"},
                {"SLURM_JOB_NODELIST", "localhost"},
                {"SLURM_JOB_ID", "7"}});
  std::string e;
  try {
    bootstrap("env://");
  } catch (const InvalidArgument& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("RANK is not set"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_PROCID in a Slurm job step"), std::string::npos) << e;
}

// What srun sets in each task of `srun -n 2` on one node, for job `job_id`.
std::map<std::string, std::string> srun_task_env(int rank, int64_t job_id,
                                                 const std::string& nodelist) {
  return {{"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", "2"},
          {"SLURM_LOCALID", std::to_string(rank)},
          {"SLURM_STEP_TASKS_PER_NODE", "2"},
          {"SLURM_NODEID", "0"},
          {"SLURM_STEP_NODELIST", nodelist},
          {"SLURM_JOB_NODELIST", "unused[1-9]"},
          {"SLURM_JOB_ID", std::to_string(job_id)},
          {"SLURMD_NODENAME", slurm_first(nodelist)}};
}

TEST(Bootstrap, SlurmStepGivesMasterFromNodeListAndPortFromJobId) {
  uint16_t port = 0;
  while (port < 10000 || port > 59999) port = free_port();  // one that port_for_job can give
  const int64_t job = 50000 + (port - 10000);               // exercises the modulo
  // Both ranks read the same variables but their own rank; the store is
  // served by rank 0 on the derived port of the step's first node.
  EnvGuard env(srun_task_env(0, job, "localhost,node[02-03]"));
  BootstrapOptions o0, o1;
  o0.rank = 0;
  o1.rank = 1;
  o0.timeout = o1.timeout = 10s;
  BootstrapResult r1;
  std::thread t([&] { r1 = bootstrap("env://", o1); });
  BootstrapResult r0 = bootstrap("env://", o0);
  t.join();
  EXPECT_EQ(r0.master_addr, "localhost");
  EXPECT_EQ(r0.master_port, port);
  EXPECT_EQ(r1.master_port, port);
  EXPECT_EQ(r0.world_size, 2);
  EXPECT_EQ(r1.local_rank, 0);  // options.rank sets the rank; SLURM_LOCALID the local one
  EXPECT_EQ(r0.local_world_size, 2);
  r1.store->set("k", std::string("from 1"));
  EXPECT_EQ(r0.store->get_string("k"), "from 1");
}

TEST(Bootstrap, MasterVariablesWinOverSlurms) {
  uint16_t port = free_port();
  auto vars = srun_task_env(0, 1, "not-a-host[1-2]");
  vars["SLURM_NTASKS"] = "1";
  vars["SLURMD_NODENAME"] = "elsewhere";
  vars["MASTER_ADDR"] = "127.0.0.1";
  vars["MASTER_PORT"] = std::to_string(port);
  EnvGuard env(vars);
  BootstrapResult r = bootstrap("env://");
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_EQ(r.master_port, port);
}

TEST(Bootstrap, SlurmRankZeroOnAnotherNodeThanTheFirstIsNamed) {
  auto vars = srun_task_env(0, 1, "node[01-02]");
  vars["SLURMD_NODENAME"] = "node02";  // e.g. srun --distribution=arbitrary
  EnvGuard env(vars);
  std::string e;
  try {
    bootstrap("env://");
  } catch (const InvalidArgument& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("rank 0 runs on node 'node02'"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_STEP_NODELIST='node[01-02]' is 'node01'"), std::string::npos) << e;
  EXPECT_NE(e.find("export MASTER_ADDR"), std::string::npos) << e;
}

TEST(Bootstrap, MalformedSlurmNodeListOrJobIdIsNamed) {
  {
    EnvGuard env(srun_task_env(0, 1, "node[01-02"));
    std::string e;
    try {
      bootstrap("env://");
    } catch (const InvalidArgument& err) {
      e = err.what();
    }
    EXPECT_NE(e.find("SLURM_STEP_NODELIST"), std::string::npos) << e;
    EXPECT_NE(e.find("unclosed '[' at position 4"), std::string::npos) << e;
  }
  {
    auto vars = srun_task_env(0, 1, "localhost");
    vars["SLURM_JOB_ID"] = "12x";
    EnvGuard env(vars);
    std::string e;
    try {
      bootstrap("env://");
    } catch (const InvalidArgument& err) {
      e = err.what();
    }
    EXPECT_NE(e.find("SLURM_JOB_ID='12x' is not a job id"), std::string::npos) << e;
  }
}

TEST(Bootstrap, TcpQueryAndHostedStoreAndRestartPrefix) {
  uint16_t port = free_port();
  EnvGuard env(std::map<std::string, std::string>{{"COHORT_TOKEN", "tok"}});
  BootstrapOptions o;
  o.timeout = 10s;
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  auto r0 = bootstrap(url + "?rank=0&world_size=2", o);
  EXPECT_NE(dynamic_cast<TcpStore*>(r0.store.get()), nullptr);
  ::setenv("COHORT_STORE_HOSTED", "1", 1);  // rank 0 as well would now be a client
  ::setenv("COHORT_RESTART_COUNT", "1", 1);
  o.rank = 1;
  o.world_size = 2;
  auto r1 = bootstrap(url, o);
  r1.store->set("k", std::string("v"));
  EXPECT_EQ(r0.store->get_string("attempt1/k"), "v");
}

TEST(EnvSettings, VariablesMapToTheOptionsAndMalformedOnesAreNamed) {
  {
    EnvGuard env({});
    EnvSettings s = read_env_settings();
    EXPECT_FALSE(s.log_level || s.num_threads || s.storage_cache || s.device_timeout_s ||
                 s.cudnn_attention);
  }
  {
    EnvGuard env({{"COHORT_LOG_LEVEL", "debug"},
                  {"COHORT_NUM_THREADS", "3"},
                  {"COHORT_STORAGE_CACHE", "0"},
                  {"COHORT_DEVICE_TIMEOUT_S", "2.5"},
                  {"COHORT_CUDNN_ATTENTION", "0"}});
    EnvSettings s = read_env_settings();
    EXPECT_EQ(s.log_level, LogLevel::kDebug);
    EXPECT_EQ(s.num_threads, 3);
    EXPECT_EQ(s.storage_cache, false);
    EXPECT_EQ(s.device_timeout_s, 2.5);
    EXPECT_EQ(s.cudnn_attention, false);
  }
  for (auto [name, value] :
       {std::pair{"COHORT_LOG_LEVEL", "shout"}, std::pair{"COHORT_NUM_THREADS", "banana"},
        std::pair{"COHORT_NUM_THREADS", "0"}, std::pair{"COHORT_STORAGE_CACHE", "-1"},
        std::pair{"COHORT_DEVICE_TIMEOUT_S", "0"}, std::pair{"COHORT_DEVICE_TIMEOUT_S", "5s"},
        std::pair{"COHORT_CUDNN_ATTENTION", "maybe"}}) {
    EnvGuard env(std::map<std::string, std::string>{{name, value}});
    try {
      read_env_settings();
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(name), std::string::npos) << m;
      EXPECT_NE(m.find(value), std::string::npos) << m;
    }
  }
}

TEST(EnvSettings, ApplySetsTheLogLevelAndTheRuntime) {
  const LogLevel level = log_level();
  const RuntimeOptions saved = Runtime::process().options();
  EnvSettings s;
  s.log_level = LogLevel::kError;
  s.num_threads = 5;
  s.storage_cache = false;
  s.cudnn_attention = false;
  apply_env_settings(s);
  EXPECT_EQ(log_level(), LogLevel::kError);
  EXPECT_FALSE(Runtime::process().options().cudnn_attention);
  EXPECT_EQ(Runtime::process().options().num_threads, 5);
  EXPECT_EQ(Runtime::process().options().storage_cache_bytes, 0u);
  s.storage_cache = true;
  apply_env_settings(s);
  EXPECT_EQ(Runtime::process().options().storage_cache_bytes, RuntimeOptions{}.storage_cache_bytes);
  apply_env_settings({});  // nothing set: nothing changes
  EXPECT_EQ(log_level(), LogLevel::kError);
  set_log_level(level);
  Runtime::process().configure(saved);
}

TEST(Bootstrap, SharedMemoryVariablesMapToTheNetworkOptions) {
  const std::string file = testing::TempDir() + "cohort_bootstrap_shm_" + std::to_string(getpid());
  const std::string url = "file://" + file + "?rank=0&world_size=1";
  {
    EnvGuard env({});
    BootstrapResult r = bootstrap(url);
    EXPECT_EQ(r.network.shm_ring_bytes, transport::NetworkOptions{}.shm_ring_bytes);
    EXPECT_TRUE(r.network.shm_single_copy);
  }
  {
    EnvGuard env({{"COHORT_SHM_RING_BYTES", "65536"}, {"COHORT_SHM_SINGLE_COPY", "0"}});
    BootstrapResult r = bootstrap(url);
    EXPECT_EQ(r.network.shm_ring_bytes, 65536u);
    EXPECT_FALSE(r.network.shm_single_copy);
  }
  for (const char* ring : {"1", "5000", "x"}) {
    EnvGuard env(std::map<std::string, std::string>{{"COHORT_SHM_RING_BYTES", ring}});
    EXPECT_THROW(bootstrap(url), InvalidArgument) << ring;
  }
  {
    EnvGuard env(std::map<std::string, std::string>{{"COHORT_SHM_SINGLE_COPY", "no"}});
    EXPECT_THROW(bootstrap(url), InvalidArgument);
  }
  std::filesystem::remove(file);
}

TEST(Bootstrap, MpirunWithoutMasterAddrIsSeen) {
  {
    EnvGuard env(std::map<std::string, std::string>{{"OMPI_COMM_WORLD_SIZE", "2"}});
    EXPECT_TRUE(env_mpirun_without_master());
  }
  {
    EnvGuard env({{"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
    EXPECT_FALSE(env_mpirun_without_master());
  }
  EnvGuard env({});
  EXPECT_FALSE(env_mpirun_without_master());
}

}  // namespace
}  // namespace cohort::rendezvous
