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
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/transport/socket.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr int64_t kBatch = 4;
constexpr const char* kToken = "ft-test";

nn::ModulePtr make_model(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 8, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(8, 1, gen)});
}

// Samples [begin, end) of the global order.
std::pair<Tensor, Tensor> samples(int64_t begin, int64_t end) {
  std::vector<float> x, y;
  for (int64_t i = begin; i < end; ++i) {
    Generator g(1000 + static_cast<uint64_t>(i));
    std::vector<float> xi = randn({4}, g).to_vector<float>();
    x.insert(x.end(), xi.begin(), xi.end());
    y.push_back(xi[0] * 0.5f - xi[2] + 0.1f);
  }
  const int64_t n = end - begin;
  return {Tensor::from_vector<float>(x, {n, 4}), Tensor::from_vector<float>(y, {n, 1})};
}

optim::SGDOptions sgd() { return {.lr = 0.05, .momentum = 0.9}; }

// What a replica does at a given step, for the tests to inject failures.
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
};

// One replica's loop; writes <dir>/<id>.params (raw floats), <id>.steps
// (the participants of each step it committed) and <id>.log.
int train_replica(const ReplicaSpec& spec, uint16_t port, const fs::path& dir) {
  auto model = make_model(spec.seed);
  optim::SGD opt(model->parameters(), sgd());
  int64_t cursor = 0;  // samples committed
  std::ofstream log(dir / (spec.id + ".log"));
  std::vector<int> committed;
  ReplicaManager m({.replica_id = spec.id,
                    .store_port = port,
                    .token = std::string(kToken),
                    .initial_replicas = spec.initial_replicas,
                    .quorum_timeout = 20s,
                    .join_timeout = 300ms,
                    .op_timeout = spec.op_timeout,
                    .heartbeat_interval = 50ms,
                    .heartbeat_timeout = 500ms,
                    .group_options = {.transport = spec.tcp ? collectives::TransportKind::kTcp
                                                            : collectives::TransportKind::kAuto},
                    .state_dict =
                        [&] {
                          for (const auto& [step, fault] : spec.faults)
                            if (fault == Fault::kKillWhenSendingState) ::raise(SIGKILL);
                          TensorDict s;
                          for (const auto& [name, p] : model->named_parameters())
                            s.insert("model." + name, p.detach());
                          s.merge(opt.state_dict(), "optim.");
                          s.insert("cursor", Tensor::from_vector<int64_t>({cursor}));
                          return s;
                        },
                    .load_state_dict =
                        [&](const TensorDict& s) {
                          NoGradGuard no_grad;
                          for (const auto& [name, p] : model->named_parameters())
                            const_cast<Tensor&>(p).copy_(s.at("model." + name));
                          opt.load_state_dict(s.sub("optim."));
                          cursor = s.at("cursor").to_vector<int64_t>()[0];
                        },
                    .log = [&](const std::string& line) { log << line << std::endl; }});
  std::unique_ptr<DistributedDataParallel> ddp;
  if (spec.ddp)
    ddp = std::make_unique<DistributedDataParallel>(
        model, m.local_group(),
        DistributedDataParallelOptions{.bucket_cap_mb = 0.0001, .comm_hook = m.comm_hook()});
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  while (m.step() < spec.steps) {
    m.start_step();
    const int n = m.num_participants();
    auto [x, y] = samples(cursor + m.rank() * kBatch, cursor + (m.rank() + 1) * kBatch);
    auto found = spec.faults.find(m.step());
    const Fault fault = found == spec.faults.end() ? Fault::kNone : found->second;
    opt.zero_grad();
    if (fault == Fault::kKillInForward) ::raise(SIGKILL);
    mse_loss(net.forward(x), y).backward();
    std::vector<Tensor> grads;
    for (Tensor& p : model->parameters()) grads.push_back(p.grad());
    if (fault == Fault::kKillBeforeAllReduce) ::raise(SIGKILL);
    if (fault == Fault::kStop) ::raise(SIGSTOP);
    if (spec.step_time.count() > 0) std::this_thread::sleep_for(spec.step_time);
    if (!ddp) m.all_reduce_average(grads);
    if (!m.should_commit()) continue;
    if (fault == Fault::kKillInOptimizerStep) ::raise(SIGKILL);
    opt.step();
    cursor += n * kBatch;
    committed.push_back(n);
  }
  std::ofstream params(dir / (spec.id + ".params"), std::ios::binary);
  for (const Tensor& p : model->parameters()) {
    Tensor c = p.contiguous();
    params.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.nbytes()));
  }
  std::ofstream steps(dir / (spec.id + ".steps"));
  steps << m.step() << " " << cursor;
  for (int n : committed) steps << " " << n;
  return 0;
}

// A replica whose loop throws writes why to <dir>/<id>.err and exits 3.
int run_replica(const ReplicaSpec& spec, uint16_t port, const fs::path& dir) {
  try {
    return train_replica(spec, port, dir);
  } catch (const std::exception& e) {
    std::ofstream(dir / (spec.id + ".err")) << e.what();
    return 3;
  }
}

pid_t fork_run(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 1;
  try {
    code = fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
    code = 3;
  }
  std::fflush(nullptr);
  ::_exit(code);
}

// The quorum service in a process of its own (so that killing it closes
// every connection to it), and the port it serves.
struct Service {
  pid_t pid = -1;
  uint16_t port = 0;
};

Service start_service() {
  uint16_t port = 0;
  UniqueFd listener = transport::listen_tcp("127.0.0.1", 0, &port);
  const int fd = listener.release();
  const pid_t pid = fork_run([fd] {
    rendezvous::TcpStoreServer server(UniqueFd(fd), {.token = std::string(kToken)});
    while (true) std::this_thread::sleep_for(1h);
    return 0;
  });
  ::close(fd);  // the replicas forked later must not hold the listener
  return {pid, port};
}

// Waits for pid with a deadline; SIGKILLs it past the deadline (a hang).
int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Committed {
  int64_t step = 0, cursor = 0;
  std::vector<int> participants;
};

Committed read_steps(const fs::path& p) {
  std::ifstream f(p);
  Committed c;
  f >> c.step >> c.cursor;
  for (int n; f >> n;) c.participants.push_back(n);
  return c;
}

// One process replaying the committed steps: each step the mean loss over
// its n x B samples (the participants' average of their means).
std::string reference_params(const std::vector<int>& participants) {
  auto model = make_model(7);
  optim::SGD opt(model->parameters(), sgd());
  int64_t cursor = 0;
  for (int n : participants) {
    auto [x, y] = samples(cursor, cursor + n * kBatch);
    opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    opt.step();
    cursor += n * kBatch;
  }
  std::string out;
  for (const Tensor& p : model->parameters()) {
    Tensor c = p.contiguous();
    out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  }
  return out;
}

double max_difference(const std::string& a, const std::string& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i + 4 <= std::min(a.size(), b.size()); i += 4) {
    float x, y;
    std::memcpy(&x, a.data() + i, 4);
    std::memcpy(&y, b.data() + i, 4);
    d = std::max(d, static_cast<double>(std::abs(x - y)));
  }
  return d;
}

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
  // The survivors' parameters are bit-identical and equal to one process
  // replaying the steps they committed; returns those steps.
  Committed expect_consistent(const std::vector<std::string>& ids, int64_t steps) {
    const Committed c = read_steps(dir_ / (ids[0] + ".steps"));
    EXPECT_EQ(c.step, steps);
    int64_t samples_seen = 0;
    for (int n : c.participants) samples_seen += n * kBatch;
    const std::string first = slurp(dir_ / (ids[0] + ".params"));
    for (const std::string& id : ids) {
      const Committed other = read_steps(dir_ / (id + ".steps"));
      EXPECT_EQ(other.step, steps) << id;
      EXPECT_EQ(other.cursor, c.cursor) << id;
      EXPECT_TRUE(slurp(dir_ / (id + ".params")) == first) << id << " differs from " << ids[0];
    }
    if (static_cast<int64_t>(c.participants.size()) == steps) {
      EXPECT_EQ(c.cursor, samples_seen);  // every committed sample counted once
      EXPECT_LT(max_difference(first, reference_params(c.participants)), 1e-5);
    }
    return c;
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
