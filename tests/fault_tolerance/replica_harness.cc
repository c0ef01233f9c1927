#include "tests/fault_tolerance/replica_harness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/transport/socket.h"
#include "tests/fault_tolerance/replica_model.h"

namespace cohort::parallel::ft_testing {

using namespace std::chrono_literals;

namespace {

// One replica's loop; writes <dir>/<id>.params (raw floats), <id>.steps
// (the participants of each step it committed) and <id>.log.
int train_replica(const ReplicaSpec& spec, uint16_t port, const fs::path& dir) {
  auto model = make_model(spec.seed);
  optim::SGD opt(model->parameters(), sgd());
  int64_t cursor = 0;  // samples committed
  std::ofstream log(dir / (spec.id + ".log"));
  std::vector<int> committed;
  ReplicaManager m(
      {.replica_id = spec.id,
       .store_host = spec.store_host,
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
             return replica_state(*model, opt, cursor);
           },
       .load_state_dict = [&](const TensorDict& s) { cursor = load_replica_state(s, *model, opt); },
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

}  // namespace

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

Service start_service(const std::string& bind_host) {
  uint16_t port = 0;
  UniqueFd listener = transport::listen_tcp(bind_host, 0, &port);
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

int serve_forever(const std::string& bind_host, const fs::path& port_file) {
  rendezvous::TcpStoreServer server({.bind_host = bind_host, .token = std::string(kToken)});
  {
    std::ofstream tmp(port_file.string() + ".tmp");
    tmp << server.port();
  }
  fs::rename(port_file.string() + ".tmp", port_file);
  while (true) std::this_thread::sleep_for(1h);
  return 0;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

namespace {

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

}  // namespace

Committed expect_consistent(const fs::path& dir_, const std::vector<std::string>& ids,
                            int64_t steps) {
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

}  // namespace cohort::parallel::ft_testing
