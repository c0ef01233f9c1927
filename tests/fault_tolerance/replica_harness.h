// The replicas of the fault-tolerance tests (replica_manager_test.cc,
// two_host_replicas_test.cc): a small MLP trained with SGD and momentum
// through a ReplicaManager over a global sample order (each committed step
// takes the next n x B samples for its n participants), failures injected at
// chosen steps, and what the tests check afterwards. Test-only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cohort::parallel::ft_testing {

namespace fs = std::filesystem;

inline constexpr int64_t kBatch = 4;
inline constexpr const char* kToken = "ft-test";

// What a replica does at a given step.
enum class Fault {
  kNone,
  kKillInForward,
  kKillBeforeAllReduce,  // backward done, its gradients not yet averaged
  kKillInOptimizerStep,  // after a commit the others made too
  kStop,
  kKillWhenSendingState,  // the source of a replica behind, as it starts sending
};

struct ReplicaSpec {
  std::string id;
  uint64_t seed = 7;
  int64_t steps = 10;
  std::map<int64_t, Fault> faults = {};  // by the step about to be committed
  int initial_replicas = 0;
  std::chrono::milliseconds op_timeout{3000};
  std::chrono::milliseconds step_time{0};  // a sleep per step, to make time pass
  bool ddp = false;                        // average through a DDP over the manager's comm hook
  bool tcp = false;  // the groups over TCP pairs (what ranks on other hosts use)
  std::string store_host = "127.0.0.1";
};

// Replicas of several processes (replica_group_test.cc): ZeRO over each
// replica's processes, averaged across replicas by the manager's sharded hook.
struct ReplicaGroupSpec {
  std::string id;  // the replica's; its processes write <id>.<group_rank>.*
  int group_size = 2;
  int group_rank = 0;
  // 0: DDP over the replica's processes; -1: tensor parallel; -2: a pipeline
  int zero_stage = 2;
  uint64_t seed = 7;
  int64_t steps = 10;
  std::map<int64_t, Fault> faults = {};  // kKillBeforeAllReduce, kStop
  int initial_replicas = 0;
  bool replacement = false;
  std::chrono::milliseconds step_time{0};
  std::chrono::milliseconds step_time_alone{0};  // instead, when the only replica
};
int run_replica_process(const ReplicaGroupSpec& spec, uint16_t port, const fs::path& dir);

// One replica's loop; writes <dir>/<id>.params (raw floats), <id>.steps
// (the participants of each step it committed), <id>.log and, when it
// throws, <id>.err (then returns 3).
int run_replica(const ReplicaSpec& spec, uint16_t port, const fs::path& dir);

// Forks; the child runs fn and _exits with its result (3 on an exception).
pid_t fork_run(const std::function<int()>& fn);
// Waits for pid; SIGKILLs it past the limit (a hang) and returns -1 then.
int wait_exit(pid_t pid, std::chrono::seconds limit);

// The quorum service (a TCP store server) in a process of its own, so that
// killing it closes every connection to it.
struct Service {
  pid_t pid = -1;
  uint16_t port = 0;
};
Service start_service(const std::string& bind_host = "127.0.0.1");
// Serves on `bind_host`, writing the port to `port_file`, until killed.
int serve_forever(const std::string& bind_host, const fs::path& port_file);

std::string slurp(const fs::path& p);

struct Committed {
  int64_t step = 0, cursor = 0;
  std::vector<int> participants;
};

// The replicas `ids` (in dir) ended at `steps` with bit-identical
// parameters equal to one process replaying the steps they committed (gtest
// expectations); returns those steps.
Committed expect_consistent(const fs::path& dir, const std::vector<std::string>& ids,
                            int64_t steps);

}  // namespace cohort::parallel::ft_testing
