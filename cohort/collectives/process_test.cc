// Collectives between real processes (fork), bootstrapped through a
// FileStore, over the automatic transport choice (shared memory on one host)
// and over TCP forced by COHORT_TRANSPORT=tcp.
#include <gtest/gtest.h>

#include <sys/uio.h>

#include <cstdlib>

#include "cohort/collectives/test_util.h"

namespace cohort::collectives {
namespace {

using namespace std::chrono_literals;

void run_suite(int rank, int n, rendezvous::Store& store, const std::string& name,
               const std::string& expect_transport) {
  CommunicatorOptions o;
  o.name = name;
  o.timeout = 30s;
  auto c = Communicator::create(store, rank, n, testing::with_env_knobs(o));
  for (int p = 0; p < n; ++p) {
    if (p != rank && c->transport_name(p) != expect_transport) {
      throw Error("transport to rank " + std::to_string(p) + " is " + c->transport_name(p));
    }
  }
  for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{300007}}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
        auto buf = testing::make_input(rank, count, dt, op);
        c->all_reduce(buf.data(), count, dt, op);
        if (buf != testing::reference_reduce(n, count, dt, op)) {
          throw Error("all_reduce wrong: " + testing::case_name(n, count, dt, op));
        }
      }
    }
    std::vector<int32_t> b(count, rank == 1 ? 42 : 0);
    c->broadcast(b.data(), count, DataType::kInt32, 1);
    for (int32_t v : b) {
      if (v != 42) throw Error("broadcast wrong");
    }
    std::vector<int32_t> mine(count, rank), all(count * static_cast<size_t>(n));
    c->all_gather(mine.data(), all.data(), count, DataType::kInt32);
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] != static_cast<int32_t>(i / count)) throw Error("all_gather wrong");
    }
  }
  c->barrier();
}

TEST(Processes, CollectivesOverSharedMemory) {
  std::string name = testing::unique_name("proc-shm");
  auto st = testing::run_processes(4, 120s, [&](int rank, rendezvous::Store& store) {
    ::unsetenv("COHORT_TRANSPORT");
    run_suite(rank, 4, store, name, "shm");
  });
  for (int s : st) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

TEST(Processes, CollectivesOverTcpForcedByEnvironment) {
  std::string name = testing::unique_name("proc-tcp");
  auto st = testing::run_processes(3, 120s, [&](int rank, rendezvous::Store& store) {
    ::setenv("COHORT_TRANSPORT", "tcp", 1);
    run_suite(rank, 3, store, name, "tcp");
  });
  for (int s : st) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

// Whether this process may read a forked child's memory (the same check the
// transport makes); when it may, sibling ranks must use the single-copy path.
bool cma_works() {
  static volatile uint64_t value = 0x5eed;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{const_cast<uint64_t*>(&value), sizeof(got)};
  bool ok = ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(got) && got == 0x5eed;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return ok;
}

TEST(Processes, SingleCopyIsUsedWhenProcessesMayReadEachOther) {
  bool expected = cma_works();
  std::string name = testing::unique_name("proc-cma");
  auto st = testing::run_processes(3, 60s, [&](int rank, rendezvous::Store& store) {
    ::unsetenv("COHORT_TRANSPORT");
    ::unsetenv("COHORT_SHM_SINGLE_COPY");
    if (expected) {
      ::setenv("COHORT_ALLREDUCE_ALGO", "pull", 1);
      ::setenv("COHORT_BROADCAST_ALGO", "pull", 1);
      ::setenv("COHORT_ALLGATHER_ALGO", "pull", 1);
    }
    CommunicatorOptions o;
    o.name = name;
    auto c = Communicator::create(store, rank, 3, testing::with_env_knobs(o));
    if (c->single_copy() != expected) throw Error("single_copy disagrees with the probe");
    std::vector<int32_t> b(100003, rank == 2 ? 9 : 0);
    c->broadcast(b.data(), b.size(), DataType::kInt32, 2);
    for (int32_t v : b) {
      if (v != 9) throw Error("broadcast (single copy) wrong");
    }
    std::vector<int32_t> mine(70001, rank), all(3 * 70001);
    c->all_gather(mine.data(), all.data(), mine.size(), DataType::kInt32);
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] != static_cast<int32_t>(i / 70001)) throw Error("all_gather (single copy) wrong");
    }
    size_t count = (size_t{1} << 20) + 3;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      auto buf = testing::make_input(rank, count, DataType::kFloat32, op);
      c->all_reduce(buf.data(), count, DataType::kFloat32, op);
      if (buf != testing::reference_reduce(3, count, DataType::kFloat32, op)) {
        throw Error("all_reduce (single copy) wrong");
      }
    }
  });
  for (int s : st) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

TEST(Processes, SingleCopyCanBeTurnedOff) {
  std::string name = testing::unique_name("proc-nocma");
  auto st = testing::run_processes(2, 60s, [&](int rank, rendezvous::Store& store) {
    CommunicatorOptions o;
    o.name = name;
    o.network.shm_single_copy = false;  // what COHORT_SHM_SINGLE_COPY=0 sets at the edge
    auto c = Communicator::create(store, rank, 2, testing::with_env_knobs(o));
    if (c->single_copy()) throw Error("single_copy still on");
  });
  for (int s : st) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

TEST(Processes, AlgorithmOverrideFromEnvironment) {
  // Both ranks force the ring for a tiny message; a rank that disagrees
  // would be reported as a mismatch, so agreement proves both read it.
  std::string name = testing::unique_name("proc-env");
  auto st = testing::run_processes(2, 60s, [&](int rank, rendezvous::Store& store) {
    ::setenv("COHORT_ALLREDUCE_ALGO", "ring", 1);
    CommunicatorOptions o;
    o.name = name;
    auto c = Communicator::create(store, rank, 2, testing::with_env_knobs(o));
    float x = static_cast<float>(rank + 1);
    c->all_reduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    if (x != 3.0f) throw Error("wrong sum");
  });
  for (int s : st) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

TEST(Processes, AlgorithmDisagreementIsAMismatch) {
  std::string name = testing::unique_name("proc-env-mismatch");
  auto st = testing::run_processes(2, 60s, [&](int rank, rendezvous::Store& store) {
    ::setenv("COHORT_ALLREDUCE_ALGO", rank == 0 ? "ring" : "direct", 1);
    CommunicatorOptions o;
    o.name = name;
    auto c = Communicator::create(store, rank, 2, testing::with_env_knobs(o));
    float x = 1.0f;
    try {
      c->all_reduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    } catch (const InvalidArgument&) {
      return;
    }
    throw Error("no mismatch reported");
  });
  for (int s : st) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

}  // namespace
}  // namespace cohort::collectives
