// The nccl backend's logic on the CPU: ranks are threads, the GPU is the
// fake CUDA device (core/fake_device_testing.h: device memory is host memory,
// events complete when the test says) and NCCL is FakeNcclComm
// (fake_nccl_comm_testing.h). Checked here: every op's results through a
// ProcessGroup, the ordering after the issuing stream, host buffers refused,
// the watchdog's time-outs and asynchronous errors, abort and destruction.
// What the real NCCL does on a GPU is nccl_gpu_test.cc's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/core/fake_device_testing.h"
#include "cohort/distributed/nccl/fake_nccl_comm_testing.h"
#include "cohort/distributed/nccl/nccl_backend.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::distributed {
namespace {

using testing::FakeNcclComm;
using testing::FakeNcclWorld;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const Device kCuda(DeviceType::kCUDA, 0);

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<float> values(const Tensor& t) {
  return t.cpu().to(DType::kFloat32).to_vector<float>();
}

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

// Fake communicators of subgroups, one world per group name.
struct SubWorlds {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<FakeNcclWorld>> worlds;
  NcclCommFactory factory() {
    return [this](rendezvous::Store&, int rank, int size, int, const std::string& group,
                  collectives::Duration) -> std::unique_ptr<NcclComm> {
      std::lock_guard<std::mutex> lk(mu);
      auto& w = worlds[group];
      if (!w) w = std::make_shared<FakeNcclWorld>(size);
      return std::make_unique<FakeNcclComm>(w, rank);
    };
  }
};

// n ranks of an nccl group over `world` as threads. The backends are made
// here, before the threads start (the fake device is not thread-safe to set
// up); fn(group, rank) runs on rank `rank`'s thread; the first failure is
// rethrown once all ended.
void run_ranks(int n, const std::shared_ptr<FakeNcclWorld>& world,
               const std::function<void(ProcessGroup&, int)>& fn,
               milliseconds timeout = std::chrono::seconds(20), SubWorlds* subs = nullptr) {
  auto store = std::make_shared<rendezvous::HashStore>();
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (int r = 0; r < n; ++r) {
    ProcessGroupOptions o;
    o.name = "nccl-test";
    o.timeout = timeout;
    o.device_index = 0;
    NcclBackendOptions no;
    no.watchdog_interval = milliseconds(5);
    if (subs) no.make_comm = subs->factory();
    auto b = std::make_unique<NcclBackend>(std::make_unique<FakeNcclComm>(world, r), o, no);
    groups.push_back(ProcessGroup::create(std::move(b), store, o));
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*groups[static_cast<size_t>(r)], r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  groups.clear();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// gather and scatter on device buffers have no ProcessGroup form (the list
// forms stage through the host), so they go to a backend directly.
DeviceCompletion run_on(Backend& b, OpArgs a, const Tensor& send, const Tensor& recv) {
  DeviceRuntime& rt = device_runtime(kCuda, "test");
  a.send = send.defined() ? send.device_data() : nullptr;
  a.recv = recv.defined() ? recv.device_data() : nullptr;
  a.timeout = std::chrono::seconds(10);
  Stream s = current_stream(kCuda);
  return b.run_on_device(a, DeviceOpContext{kCuda, s, rt.record(s), {}});
}

TEST(NcclBackend, EveryOpGivesTheCollectivesResultsAtThreeRanks) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(3);
  run_ranks(3, world, [](ProcessGroup& pg, int rank) {
    const auto r = static_cast<float>(rank);
    Tensor t = Tensor::from_vector<float>({r, 2 * r, 1}, {3}).to(kCuda);
    pg.all_reduce(t);
    EXPECT_EQ(values(t), (std::vector<float>{3, 6, 3}));
    pg.all_reduce(t, {.op = ReduceOp::kAvg});
    EXPECT_EQ(values(t), (std::vector<float>{3, 6, 3}));
    Tensor m = Tensor::from_vector<float>({r, -r}, {2}).to(kCuda);
    pg.all_reduce(m, {.op = ReduceOp::kMax});
    EXPECT_EQ(values(m), (std::vector<float>{2, 0}));
    Tensor h = Tensor::full({4}, 0.5 + rank, DType::kBFloat16, kCuda);
    Work hw = pg.all_reduce(h, {}, async_op);
    hw.wait();
    EXPECT_EQ(values(h), std::vector<float>(4, 4.5f));

    Tensor b = Tensor::full({2}, r, DType::kFloat32, kCuda);
    pg.broadcast(b, {.root = 2});
    EXPECT_EQ(values(b), (std::vector<float>{2, 2}));
    Tensor red = Tensor::full({2}, r + 1, DType::kFloat32, kCuda);
    pg.reduce(red, {.op = ReduceOp::kProduct, .root = 1});
    if (rank == 1) {
      EXPECT_EQ(values(red), (std::vector<float>{6, 6}));
    } else {
      EXPECT_EQ(values(red), (std::vector<float>{r + 1, r + 1})) << "only the root receives";
    }

    Tensor in = Tensor::full({2}, r, DType::kFloat32, kCuda);
    Tensor all = Tensor::zeros({6}, DType::kFloat32, kCuda);
    pg.all_gather_into_tensor(all, in);
    EXPECT_EQ(values(all), (std::vector<float>{0, 0, 1, 1, 2, 2}));
    Tensor shards = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {6}).to(kCuda);
    Tensor mine = Tensor::zeros({2}, DType::kFloat32, kCuda);
    pg.reduce_scatter_tensor(mine, shards, {.op = ReduceOp::kAvg});
    EXPECT_EQ(values(mine), (std::vector<float>{2 * r + 1, 2 * r + 2}));
    // all_to_all: rank r sends 10 r + p to rank p.
    Tensor out = Tensor::zeros({3}, DType::kFloat32, kCuda);
    Tensor send = Tensor::from_vector<float>({10 * r, 10 * r + 1, 10 * r + 2}, {3}).to(kCuda);
    pg.all_to_all_single(out, send);
    EXPECT_EQ(values(out), (std::vector<float>{r, 10 + r, 20 + r}));

    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    Tensor msg = Tensor::full({4}, r, DType::kFloat32, kCuda);
    Work s = pg.send(msg, next, {}, async_op);
    Tensor got = Tensor::zeros({4}, DType::kFloat32, kCuda);
    pg.recv(got, prev);
    s.wait();
    EXPECT_EQ(values(got), std::vector<float>(4, static_cast<float>(prev)));
    pg.barrier();
  });
}

TEST(NcclBackend, AllToAllVIsGroupedSendRecvAndBitwiseIsNotSupported) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(3);
  run_ranks(3, world, [](ProcessGroup& pg, int rank) {
    // Rank r sends (r + 2j) % 3 elements to rank j (zeros included).
    std::vector<int64_t> in_splits, out_splits;
    std::vector<float> in, want;
    for (int j = 0; j < 3; ++j) {
      in_splits.push_back((rank + 2 * j) % 3);
      out_splits.push_back((j + 2 * rank) % 3);
      for (int e = 0; e < (rank + 2 * j) % 3; ++e) in.push_back(100.0f * rank + 10.0f * j + e);
      for (int e = 0; e < (j + 2 * rank) % 3; ++e) want.push_back(100.0f * j + 10.0f * rank + e);
    }
    Tensor input = Tensor::from_vector<float>(in, {static_cast<int64_t>(in.size())}).to(kCuda);
    Tensor output = Tensor::zeros({static_cast<int64_t>(want.size())}, DType::kFloat32, kCuda);
    Work w = pg.all_to_all_single(output, input, out_splits, in_splits, {}, async_op);
    w.wait();
    EXPECT_EQ(values(output), want);
    // NCCL has no bitwise reductions: refused before anything is issued.
    Tensor t = Tensor::full({2}, 3.0, DType::kInt64, kCuda);
    try {
      pg.all_reduce(t, {.op = ReduceOp::kBand});
      ADD_FAILURE() << "band accepted by nccl";
    } catch (const NotSupported& e) {
      EXPECT_TRUE(contains(e.what(), "reduction 'band' is not supported: NCCL has no bitwise"))
          << e.what();
    }
    // The group goes on: the next op is numbered after the refused one on every rank.
    pg.all_reduce(t);
    EXPECT_EQ(t.cpu().to_vector<int64_t>(), (std::vector<int64_t>{9, 9}));
  });
}

TEST(NcclBackend, GatherAndScatterAreGroupedSendRecv) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(2);
  auto store = std::make_shared<rendezvous::HashStore>();
  std::vector<std::unique_ptr<NcclBackend>> backends;
  ProcessGroupOptions o;
  o.device_index = 0;
  for (int r = 0; r < 2; ++r) {
    backends.push_back(std::make_unique<NcclBackend>(std::make_unique<FakeNcclComm>(world, r), o));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto f = static_cast<float>(r);
      Tensor mine = Tensor::from_vector<float>({f, f + 10}, {2}).to(kCuda);
      Tensor all = Tensor::zeros({4}, DType::kFloat32, kCuda);
      OpArgs g;
      g.kind = OpKind::kGather;
      g.count = 2;
      g.root = 1;
      run_on(*backends[r], g, mine, r == 1 ? all : Tensor()).check();
      if (r == 1) {
        EXPECT_EQ(values(all), (std::vector<float>{0, 10, 1, 11}));
      }

      Tensor parts = Tensor::from_vector<float>({5, 6, 7, 8}, {4}).to(kCuda);
      Tensor part = Tensor::zeros({2}, DType::kFloat32, kCuda);
      OpArgs s;
      s.kind = OpKind::kScatter;
      s.count = 2;
      s.root = 0;
      run_on(*backends[r], s, r == 0 ? parts : Tensor(), part).check();
      EXPECT_EQ(values(part), r == 0 ? (std::vector<float>{5, 6}) : (std::vector<float>{7, 8}));
    });
  }
  for (auto& t : threads) t.join();
  // Grouped: each rank's point-to-point calls sat between group_start and group_end.
  EXPECT_GE(world->calls.load(), 2 * 2 + 4);
}

TEST(NcclBackend, TheCommStreamWaitsForTheIssuingStreamBeforeTheCall) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(1);
  std::atomic<int> waits_at_call{-1};
  world->on_call = [&](int, const std::string&) { waits_at_call = fake.waits.load(); };
  ProcessGroupOptions o;
  o.device_index = 0;
  auto owned = std::make_unique<NcclBackend>(std::make_unique<FakeNcclComm>(world, 0), o,
                                             NcclBackendOptions{milliseconds(5), {}});
  NcclBackend* backend = owned.get();
  auto pg = ProcessGroup::create(std::move(owned), std::make_shared<rendezvous::HashStore>(), o);
  Tensor t = Tensor::ones({4}, DType::kFloat32, kCuda);
  const int before = fake.waits;
  pg->all_reduce(t);
  // The comm stream waited on the issuing stream's event before NCCL was
  // called, and the (blocking) op made the issuing stream wait on its end.
  EXPECT_EQ(waits_at_call.load(), before + 1);
  EXPECT_EQ(fake.waits - before, 2);
  EXPECT_NE(backend->stream(), current_stream(kCuda)) << "the group has its own stream";
  // Async: the comm stream waits for the issuing stream's event (when the
  // group's thread runs the op), the issuing stream for the end only in
  // Work::wait.
  Work w = pg->all_reduce(t, {}, async_op);
  w.wait();
  EXPECT_EQ(waits_at_call.load(), before + 3);
  EXPECT_EQ(fake.waits - before, 4);
  EXPECT_TRUE(w.is_completed());
  // The watchdog marks the ops completed in the flight recorder on its next round.
  std::string record;
  for (const auto start = Clock::now(); ms_since(start) < 2000;) {
    record = pg->flight_record();
    if (!contains(record, "started")) break;
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_TRUE(contains(record,
                       "\"op\":\"all_reduce\",\"reduce\":0,\"root\":-1,\"seq\":1,"
                       "\"state\":\"completed\""))
      << record;
  EXPECT_FALSE(contains(record, "started")) << record;
}

TEST(NcclBackend, HostBuffersAreRefusedButBarrierRuns) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(2);
  run_ranks(2, world, [](ProcessGroup& pg, int) {
    Tensor host = Tensor::ones({4});
    try {
      pg.all_reduce(host);
      ADD_FAILURE() << "a host tensor was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "nccl backend: all_reduce on host buffers")) << e.what();
      EXPECT_TRUE(contains(e.what(), ".cuda()")) << e.what();
      EXPECT_TRUE(contains(e.what(), "native backend")) << e.what();
    }
    pg.barrier();
    // The refused op kept its sequence number: the group's next op is seq 2.
    Tensor t = Tensor::ones({2}, DType::kFloat32, kCuda);
    pg.all_reduce(t);
    EXPECT_EQ(values(t), (std::vector<float>{2, 2}));
  });
}

TEST(NcclBackend, RecvAnyIsNotSupported) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(2);
  run_ranks(2, world, [](ProcessGroup& pg, int rank) {
    Tensor t = Tensor::zeros({2}, DType::kFloat32, kCuda);
    if (rank == 0) {
      try {
        pg.recv_any(t);
        ADD_FAILURE() << "recv_any was accepted";
      } catch (const NotSupported& e) {
        EXPECT_TRUE(contains(e.what(), "nccl backend: recv_any")) << e.what();
        EXPECT_TRUE(contains(e.what(), "no any-source receive")) << e.what();
      }
      Work w = pg.recv_any(t, {}, async_op);
      EXPECT_THROW(w.wait(), NotSupported);
      EXPECT_EQ(w.source_rank(), -1);
    }
    // Refused before it reached NCCL: the group still runs.
    pg.barrier();
    Tensor one = Tensor::ones({2}, DType::kFloat32, kCuda);
    pg.all_reduce(one);
    EXPECT_EQ(values(one), (std::vector<float>{2, 2}));
  });
}

// Waits (bounded) for a Work's failure; returns the exception and how long it took.
std::exception_ptr wait_for_failure(Work& w, Clock::time_point since, long long& took_ms) {
  for (;;) {
    try {
      w.wait();
    } catch (...) {
      took_ms = ms_since(since);
      return std::current_exception();
    }
    if (ms_since(since) > 10000) return nullptr;
    std::this_thread::sleep_for(milliseconds(2));
  }
}

TEST(NcclBackend, TheWatchdogTimesOutAHungOpAndLaterOpsFailAtOnce) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(2);
  std::atomic<int> ready{0};
  run_ranks(2, world, [&](ProcessGroup& pg, int rank) {
    Tensor t = Tensor::ones({4}, DType::kFloat32, kCuda);
    pg.all_reduce(t);  // seq 0 completes
    if (++ready == 2) {
      fake.memory().complete_events = false;  // from now on nothing ends on the device
      world->hang = true;
    }
    while (!world->hang) std::this_thread::yield();
    const auto start = Clock::now();
    Work w = pg.all_reduce(t, {.timeout = milliseconds(200)}, async_op);  // seq 1 hangs
    long long took = 0;
    std::exception_ptr e = wait_for_failure(w, start, took);
    ASSERT_TRUE(e) << "the hung op never failed";
    try {
      std::rethrow_exception(e);
    } catch (const TimeoutError& err) {
      const std::string what = err.what();
      EXPECT_TRUE(contains(what, "all_reduce (seq 1)")) << what;
      EXPECT_TRUE(contains(what, "group 'nccl-test'")) << what;
      EXPECT_TRUE(contains(what, "(rank " + std::to_string(rank) + ")")) << what;
      EXPECT_TRUE(contains(what, "timed out after 200 ms")) << what;
      EXPECT_TRUE(contains(what, "aborted the communicator")) << what;
    } catch (const std::exception& other) {
      ADD_FAILURE() << "not a TimeoutError: " << other.what();
    }
    EXPECT_GE(took, 200);
    EXPECT_LT(took, 1200) << "the watchdog took too long";
    // Later ops fail at once with the same error.
    const auto later = Clock::now();
    EXPECT_THROW(pg.all_reduce(t), TimeoutError);
    EXPECT_THROW(pg.barrier(), TimeoutError);
    EXPECT_LT(ms_since(later), 100);
    const std::string record = pg.flight_record();
    EXPECT_TRUE(contains(record, "failed")) << record;
  });
  EXPECT_EQ(world->aborts.load(), 2) << "each rank aborted its communicator";
}

TEST(NcclBackend, AnAsyncErrorOfTheCommunicatorFailsTheOpAsPeerLost) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(1);
  ProcessGroupOptions o;
  o.name = "nccl-async";
  o.device_index = 0;
  o.timeout = std::chrono::seconds(60);
  auto pg = ProcessGroup::create(
      std::make_unique<NcclBackend>(std::make_unique<FakeNcclComm>(world, 0), o,
                                    NcclBackendOptions{milliseconds(5), {}}),
      std::make_shared<rendezvous::HashStore>(), o);
  Tensor t = Tensor::ones({4}, DType::kFloat32, kCuda);
  fake.memory().complete_events = false;
  world->hang = true;
  Work w = pg->broadcast(t, {}, async_op);
  world->set_async_error({false, true, "remote process exited or there was a network error"});
  const auto start = Clock::now();
  long long took = 0;
  std::exception_ptr e = wait_for_failure(w, start, took);
  ASSERT_TRUE(e);
  try {
    std::rethrow_exception(e);
  } catch (const PeerLost& err) {
    const std::string what = err.what();
    EXPECT_TRUE(contains(what, "rank 0 of group 'nccl-async'")) << what;
    EXPECT_TRUE(contains(what, "broadcast (seq 0) failed: remote process exited")) << what;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "not PeerLost: " << other.what();
  }
  EXPECT_LT(took, 1000);
  EXPECT_EQ(world->aborts.load(), 1);
  EXPECT_THROW(pg->all_reduce(t), PeerLost);
}

TEST(NcclBackend, AbortFromAnotherThreadFailsThePendingAndLaterOps) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(1);
  ProcessGroupOptions o;
  o.name = "nccl-abort";
  o.device_index = 0;
  o.timeout = std::chrono::seconds(60);
  auto pg = ProcessGroup::create(
      std::make_unique<NcclBackend>(std::make_unique<FakeNcclComm>(world, 0), o),
      std::make_shared<rendezvous::HashStore>(), o);
  Tensor t = Tensor::ones({4}, DType::kFloat32, kCuda);
  fake.memory().complete_events = false;
  world->hang = true;
  Work w = pg->all_reduce(t, {}, async_op);
  std::thread other([&] { pg->abort("rank 3 left"); });
  other.join();
  try {
    w.wait();
    ADD_FAILURE() << "the aborted op succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "aborted: rank 3 left")) << e.what();
  }
  EXPECT_EQ(world->aborts.load(), 1);
  EXPECT_THROW(pg->barrier(), Error);
}

TEST(NcclBackend, DestructionWithAPendingOpDoesNotHang) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(2);
  ProcessGroupOptions o;
  o.name = "nccl-destroy";
  o.device_index = 0;
  o.timeout = std::chrono::seconds(60);
  auto pg = ProcessGroup::create(
      std::make_unique<NcclBackend>(std::make_unique<FakeNcclComm>(world, 0), o),
      std::make_shared<rendezvous::HashStore>(), o);
  Tensor t = Tensor::ones({4}, DType::kFloat32, kCuda);
  fake.memory().complete_events = false;
  world->hang = true;  // rank 1 never comes
  Work w = pg->all_reduce(t, {}, async_op);
  const auto start = Clock::now();
  pg.reset();
  EXPECT_LT(ms_since(start), 1000);
  EXPECT_EQ(world->aborts.load(), 1);
  try {
    w.wait();
    ADD_FAILURE() << "an op of a destroyed group succeeded";
  } catch (const Error& e) {
    // Either the ProcessGroup aborted it (still queued) or the backend did (enqueued).
    EXPECT_TRUE(contains(e.what(), "destroyed")) << e.what();
  }
}

TEST(NcclBackend, ASubgroupMeetsOverItsOwnCommunicator) {
  cohort::testing::FakeCudaDevice fake;
  auto world = std::make_shared<FakeNcclWorld>(3);
  SubWorlds subs;
  run_ranks(
      3, world,
      [](ProcessGroup& pg, int rank) {
        auto evens = pg.new_group({0, 2});
        if (rank == 1) {
          EXPECT_EQ(evens, nullptr);
          return;
        }
        ASSERT_NE(evens, nullptr);
        EXPECT_EQ(evens->backend(), BackendKind::kNccl);
        Tensor t = Tensor::full({2}, rank + 1.0, DType::kFloat32, kCuda);
        evens->all_reduce(t);
        EXPECT_EQ(values(t), (std::vector<float>{4, 4}));
      },
      std::chrono::seconds(20), &subs);
  EXPECT_EQ(subs.worlds.size(), 1u);
}

}  // namespace
}  // namespace cohort::distributed
