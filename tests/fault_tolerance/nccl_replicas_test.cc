// The nccl form of ReplicaManager on the CPU: the replicas are threads, the
// GPU is the fake CUDA device (core/fake_device_testing.h: device memory is
// host memory) and NCCL is FakeNcclComm (a world per group, as a real
// communicator is per group). What it shows is the protocol on a backend
// that cannot see a peer die: a replica that vanishes mid-step leaves its
// peers' all_reduce hanging until the watchdog's deadline (op_timeout)
// aborts the communicator; the step is not committed, the next quorum drops
// the lost one and a new communicator is made over the survivors, who train
// on; a replacement receives the state over the communicator (device
// buffers) and ends bit-identical. What real NCCL does on a GPU is not
// checked here (no GPU has run it).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "cohort/core/fake_device_testing.h"
#include "cohort/distributed/nccl/fake_nccl_comm_testing.h"
#include "cohort/distributed/nccl/nccl_backend.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "tests/fault_tolerance/replica_harness.h"
#include "tests/fault_tolerance/replica_model.h"

namespace cohort::parallel {
namespace {

using namespace ft_testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const Device kCuda(DeviceType::kCUDA, 0);

// One fake world per group name: every member of a quorum's group meets in it.
struct FakeWorlds {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<distributed::testing::FakeNcclWorld>> worlds;

  std::shared_ptr<distributed::ProcessGroup> make(std::shared_ptr<rendezvous::Store> store,
                                                  int rank, int size,
                                                  const distributed::ProcessGroupOptions& go) {
    std::lock_guard<std::mutex> lock(mu);
    auto& w = worlds[go.name];
    if (!w) w = std::make_shared<distributed::testing::FakeNcclWorld>(size);
    distributed::NcclBackendOptions no;
    no.watchdog_interval = 5ms;
    auto backend = std::make_unique<distributed::NcclBackend>(
        std::make_unique<distributed::testing::FakeNcclComm>(w, rank), go, no);
    return distributed::ProcessGroup::create(std::move(backend), std::move(store), go);
  }
};

struct Replica {
  std::string id;
  uint64_t seed = 7;
  int64_t vanish_at = -1;  // returns mid-step there, before averaging
  bool replacement = false;
};

class NcclReplicas : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("cohort_ft_nccl_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // One replica's loop: the model on the host, its gradients averaged on the
  // (fake) device through the manager's nccl group. Writes what
  // expect_consistent reads; returns "" or the error.
  std::string train(const Replica& r, int64_t steps) {
    try {
      auto model = make_model(r.seed);
      optim::SGD opt(model->parameters(), sgd());
      int64_t cursor = 0;
      std::vector<int> committed;
      std::ofstream log(dir_ / (r.id + ".log"));
      ReplicaManager m(
          {.replica_id = r.id,
           .store_port = server_.port(),
           .token = std::string(kToken),
           .initial_replicas = r.replacement ? 0 : 3,
           .replacement = r.replacement,
           .quorum_timeout = 20s,
           .join_timeout = 300ms,
           .op_timeout = 1s,
           .heartbeat_interval = 50ms,
           .heartbeat_timeout = 500ms,
           .backend = distributed::BackendKind::kNccl,
           .device = kCuda,
           .make_group = [this](auto store, int rank, int size,
                                const auto& go) { return worlds_.make(store, rank, size, go); },
           .state_dict = [&] { return replica_state(*model, opt, cursor); },
           .load_state_dict =
               [&](const TensorDict& s) { cursor = load_replica_state(s, *model, opt); },
           .log = [&](const std::string& line) { log << line << std::endl; }});
      while (m.step() < steps) {
        m.start_step();
        const int n = m.num_participants();
        auto [x, y] = samples(cursor + m.rank() * kBatch, cursor + (m.rank() + 1) * kBatch);
        opt.zero_grad();
        mse_loss(model->forward(x), y).backward();
        if (m.step() == r.vanish_at) return "vanished";
        std::vector<Tensor> grads;
        for (Tensor& p : model->parameters()) grads.push_back(p.grad().to(kCuda));
        m.all_reduce_average(grads);
        if (!m.should_commit()) continue;
        {
          NoGradGuard no_grad;
          size_t i = 0;
          for (Tensor& p : model->parameters()) p.grad().copy_(grads[i++].cpu());
        }
        opt.step();
        cursor += n * kBatch;
        committed.push_back(n);
        std::this_thread::sleep_for(20ms);
      }
      std::ofstream params(dir_ / (r.id + ".params"), std::ios::binary);
      for (const Tensor& p : model->parameters()) {
        Tensor c = p.contiguous();
        params.write(static_cast<const char*>(c.raw_data()),
                     static_cast<std::streamsize>(c.nbytes()));
      }
      std::ofstream out(dir_ / (r.id + ".steps"));
      out << m.step() << " " << cursor;
      for (int k : committed) out << " " << k;
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  fs::path dir_;
  testing::FakeCudaDevice device_;
  rendezvous::TcpStoreServer server_{{.bind_host = "127.0.0.1", .token = std::string(kToken)}};
  FakeWorlds worlds_;
};

TEST_F(NcclReplicas, AVanishedReplicaIsDroppedByTheWatchdogAndAReplacementRejoins) {
  constexpr int64_t kSteps = 40;
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    Replica r{.id = fmt::format("r{}", i), .vanish_at = i == 2 ? 4 : -1};
    threads.emplace_back([&, i, r] { errors[static_cast<size_t>(i)] = train(r, kSteps); });
  }
  threads[2].join();
  EXPECT_EQ(errors[2], "vanished");
  // Once the survivors went on without it, its replacement: other weights, step 0.
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (slurp(dir_ / "r0.log").find("lost [r2]") == std::string::npos &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  threads[2] = std::thread(
      [&] { errors[3] = train({.id = "r2", .seed = 99, .replacement = true}, kSteps); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(errors[3], "");
  const std::string log = slurp(dir_ / "r0.log");
  // The survivors' op ended by the watchdog's deadline, not by a lost connection.
  EXPECT_NE(log.find("step 4 fails while averaging the gradients"), std::string::npos) << log;
  EXPECT_NE(log.find("lost [r2]"), std::string::npos) << log;
  EXPECT_NE(log.find("joined [r2]"), std::string::npos) << log;
  EXPECT_NE(slurp(dir_ / "r2.log").find("received the state of step"), std::string::npos);
  const Committed c = expect_consistent(dir_, {"r0", "r1", "r2"}, kSteps);
  EXPECT_EQ(c.participants.front(), 3);
  EXPECT_EQ(c.participants[4], 2);
  EXPECT_EQ(c.participants.back(), 3);
  // Every quorum's group was a communicator of its own.
  std::lock_guard<std::mutex> lock(worlds_.mu);
  EXPECT_GE(worlds_.worlds.size(), 3u);
}

TEST(NcclReplicaOptions, TheNcclFormNeedsADevice) {
  try {
    ReplicaManager m(
        {.replica_id = "r0", .store_port = 1, .backend = distributed::BackendKind::kNccl});
    ADD_FAILURE() << "nccl without a device accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the nccl backend takes device buffers"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::parallel
