// A job on cuda:1 of a host of two (fake) GPUs: the threads cohort starts
// for it -- a process group's queue, the nccl watchdog, the data loader's
// prefetch thread -- make every CUDA call with cuda:1 current. A call with
// cuda:0 current creates a context there (about 0.5 GB of GPU 0 on every
// rank of an 8-GPU job), and a wait on the null stream then orders cuda:0's
// default stream instead of the issuing one, so the step reads a
// collective's results early.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cohort/cuda/fake_cuda_api_testing.h"
#include "cohort/cuda/runtime_impl.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/tensor_dataset.h"
#include "cohort/distributed/nccl/fake_nccl_comm_testing.h"
#include "cohort/distributed/nccl/nccl_backend.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort {
namespace {

using cuda::CudaRuntime;
using cuda::testing::FakeCudaApi;

const Device kCuda1(DeviceType::kCUDA, 1);

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += "  " + l + "\n";
  return out;
}

// The CUDA runtime over two fake GPUs, registered with core for the scope;
// the main thread works on cuda:1, as init_worker_group makes it.
class TwoFakeGpus {
 public:
  TwoFakeGpus() : runtime(api, false), previous_(find_device_runtime(DeviceType::kCUDA)) {
    register_device_runtime(DeviceType::kCUDA, &runtime);
    runtime.set_device(1);
  }
  ~TwoFakeGpus() { register_device_runtime(DeviceType::kCUDA, previous_); }

  void expect_nothing_on_cuda0() const {
    EXPECT_EQ(api.contexts(), std::set<int>{1}) << "contexts made:\n"
                                                << joined(api.context_makers());
    EXPECT_TRUE(api.calls_with_current(0).empty()) << "calls with cuda:0 current:\n"
                                                   << joined(api.calls_with_current(0));
    EXPECT_TRUE(api.misuses().empty()) << joined(api.misuses());
  }
  // The waits on cuda:1's default stream (the issuing stream of the tests).
  int default_stream_waits_on_cuda1() const {
    int n = 0;
    for (const FakeCudaApi::Wait& w : api.waits()) n += w.stream_device == 1 && w.stream == 0;
    return n;
  }

  FakeCudaApi api{2};
  CudaRuntime runtime;

 private:
  DeviceRuntime* previous_;
};

// A group on cuda:1, made and used by a main thread on cuda:1.
struct Cuda1Group {
  explicit Cuda1Group(std::shared_ptr<distributed::testing::FakeNcclWorld> w)
      : world(std::move(w)) {
    distributed::ProcessGroupOptions o;
    o.name = "cuda1";
    o.device_index = 1;
    distributed::NcclBackendOptions no;
    no.watchdog_interval = std::chrono::milliseconds(2);
    auto backend = std::make_unique<distributed::NcclBackend>(
        std::make_unique<distributed::testing::FakeNcclComm>(world, 0), o, no);
    pg = distributed::ProcessGroup::create(std::move(backend),
                                           std::make_shared<rendezvous::HashStore>(), o);
  }
  // An async op, which runs on the group's queue thread (this thread does
  // not wait for it until its NCCL call, held `hold` long, has begun there),
  // then a blocking one queued behind it.
  void async_then_blocking(const Tensor& t, std::chrono::milliseconds hold) {
    std::atomic<int> calls{0};
    std::atomic<bool> started{false};
    std::thread::id first_caller;
    const auto previous = world->on_call;
    world->on_call = [&, on_call = previous](int rank, const std::string& call) {
      if (on_call) on_call(rank, call);
      if (calls++ > 0) return;
      first_caller = std::this_thread::get_id();
      started = true;
      std::this_thread::sleep_for(hold);
    };
    distributed::Work w = pg->all_reduce(t, {}, distributed::async_op);
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!started && std::chrono::steady_clock::now() < limit)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(started) << "the queue thread never ran the async op";
    pg->all_reduce(t);
    w.wait();
    world->on_call = previous;
    EXPECT_NE(first_caller, std::this_thread::get_id()) << "the async op ran on this thread";
    EXPECT_EQ(pg->stats().ops_queued, 2u);
  }

  std::shared_ptr<distributed::testing::FakeNcclWorld> world;
  std::shared_ptr<distributed::ProcessGroup> pg;
};

TEST(CudaThreads, AnNcclGroupsQueueAndWatchdogWorkOnTheGroupsDevice) {
  TwoFakeGpus gpus;
  {
    Cuda1Group g(std::make_shared<distributed::testing::FakeNcclWorld>(1));
    Tensor t = Tensor::empty({4}, DType::kFloat32, kCuda1);
    g.async_then_blocking(t, std::chrono::milliseconds(50));
    // The issuing stream (cuda:1's default) waited for both ops: the
    // blocking op's wait issued where it ran (the queue thread, as a rule),
    // the async op's in Work::wait on this one.
    EXPECT_EQ(gpus.default_stream_waits_on_cuda1(), 2) << "the issuing stream did not wait";
    // The watchdog's rounds query the ops' end events meanwhile and after.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  gpus.expect_nothing_on_cuda0();
}

// In a process that has a context on cuda:0 too (another rank's), the
// runtime gives a thread its device back after each call; NCCL's calls on the
// queue thread still find the group's device current.
TEST(CudaThreads, NcclIsCalledWithTheGroupsDeviceCurrent) {
  TwoFakeGpus gpus;
  std::thread([&] { gpus.runtime.set_device(0); }).join();  // the other rank
  std::mutex mu;
  std::vector<std::string> wrong;
  {
    auto world = std::make_shared<distributed::testing::FakeNcclWorld>(1);
    world->on_call = [&](int, const std::string& call) {
      const int current = gpus.api.current_of_this_thread();
      std::lock_guard<std::mutex> lock(mu);
      if (current != 1)
        wrong.push_back(call + " with cuda:" + std::to_string(current) + " current");
    };
    Cuda1Group g(world);
    Tensor t = Tensor::empty({4}, DType::kFloat32, kCuda1);
    g.async_then_blocking(t, std::chrono::milliseconds(30));
    // A blocking op on an idle group runs on its caller, here a thread on
    // cuda:0: NCCL still finds cuda:1 current, and the caller gets cuda:0 back.
    std::thread([&] {
      try {
        gpus.runtime.set_device(0);
        g.pg->all_reduce(t);
        EXPECT_EQ(gpus.api.current_of_this_thread(), 0);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "the blocking op failed: " << e.what();
      }
    }).join();
    EXPECT_GE(world->calls.load(), 3);
  }
  EXPECT_TRUE(wrong.empty()) << joined(wrong);
  EXPECT_TRUE(gpus.api.misuses().empty()) << joined(gpus.api.misuses());
}

TEST(CudaThreads, AHostBackendsStagedOpsWorkOnTheTensorsDevice) {
  TwoFakeGpus gpus;
  {
    distributed::ProcessGroupOptions o;
    o.device_index = 1;
    auto pg = distributed::ProcessGroup::create(distributed::BackendKind::kNative,
                                                std::make_shared<rendezvous::HashStore>(), 0, 1, o);
    Tensor t = Tensor::ones({4}).to(kCuda1);
    // Async, and not waited for until done: staged on the group's queue thread.
    distributed::Work w = pg->all_reduce(t, {}, distributed::async_op);
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!w.is_completed() && std::chrono::steady_clock::now() < limit)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    w.wait();
    int copies_elsewhere = 0;  // the main thread is the fake's first
    for (const FakeCudaApi::Call& c : gpus.api.calls())
      copies_elsewhere += c.thread != 1 && c.name == "cudaMemcpyAsync";
    EXPECT_EQ(copies_elsewhere, 2) << "the op was not staged on the queue thread";
    EXPECT_EQ(t.to(kCPU).to_vector<float>(), std::vector<float>(4, 1.0f));
    pg.reset();
  }
  gpus.expect_nothing_on_cuda0();
}

// "cuda" too: the consumer's current device (cuda:1), not the prefetch
// thread's (cuda:0 until it selects one).
TEST(CudaThreads, TheDataLoadersPrefetchThreadWorksOnItsDevice) {
  for (Device device : {kCuda1, Device(DeviceType::kCUDA)}) {
    SCOPED_TRACE(device.str());
    TwoFakeGpus gpus;
    {
      auto data = std::make_shared<data::TensorDataset>(Tensor::ones({8, 2}),
                                                        Tensor::zeros({8}, DType::kInt64));
      data::DataLoaderOptions options;
      options.batch_size = 4;
      options.device = device;
      data::DataLoader loader(data, options);
      int batches = 0;
      for (data::Batch& b : loader) {
        EXPECT_EQ(b.input.device(), kCuda1);
        EXPECT_EQ(b.input.to(kCPU).to_vector<float>(), std::vector<float>(8, 1.0f));
        ++batches;
      }
      EXPECT_EQ(batches, 2);
      // The consumer's stream waited for each batch's copy.
      EXPECT_GE(gpus.default_stream_waits_on_cuda1(), 2);
    }
    gpus.expect_nothing_on_cuda0();
  }
}

}  // namespace
}  // namespace cohort
