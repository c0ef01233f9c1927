// The CUDA runtime's device selection, side streams and workspaces, over a
// fake of two GPUs (fake_cuda_api_testing.h) and core's fake device: they
// run, and can fail, on a machine without a GPU.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "cohort/core/fake_device_testing.h"
#include "cohort/cuda/fake_cuda_api_testing.h"
#include "cohort/cuda/runtime.h"
#include "cohort/cuda/runtime_impl.h"

namespace cohort::cuda {
namespace {

using testing::FakeCudaApi;

const Device kCuda1(DeviceType::kCUDA, 1);

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

template <typename Fn>
void on_new_thread(Fn fn) {
  std::thread t(fn);
  t.join();
}

// The defect: process_group_device.cc waits on the issuing stream (cuda:1's
// default stream) from its queue thread, whose current device is 0. The
// null stream handle then means cuda:0's default stream, and cuda:1 reads
// the collective's results early.
TEST(CudaRuntimeDevices, AWaitOnTheDefaultStreamIsIssuedWithItsDeviceCurrent) {
  FakeCudaApi api(2);
  CudaRuntime rt(api, false);
  const Event done = rt.record(rt.side_stream(1, StreamPurpose::kCollectives));
  on_new_thread([&] {
    rt.set_device(0);  // a thread that works on cuda:0 too (its context exists)
    rt.wait(rt.default_stream(1), done);
    EXPECT_EQ(api.current_of_this_thread(), 0) << "the caller's device is restored";
  });
  std::vector<FakeCudaApi::Wait> waits = api.waits();
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].stream_device, 1) << "cuda:0's default stream waited instead of cuda:1's";
  EXPECT_EQ(waits[0].stream, 0u);
  EXPECT_EQ(waits[0].current, 1);
  EXPECT_EQ(waits[0].event_device, 1);
  EXPECT_TRUE(api.misuses().empty()) << joined(api.misuses());
}

// A thread that never chose a device (a watchdog, a queue, a data loader)
// and works for cuda:1 must not create a context on cuda:0: about 0.5 GB of
// GPU 0 on every rank of an 8-GPU job.
TEST(CudaRuntimeDevices, EveryEntryPointSelectsTheDeviceOfItsStreamEventOrMemory) {
  FakeCudaApi api(2);
  CudaRuntime rt(api, false);
  rt.set_device(1);  // the job's main thread, as init_worker_group does
  on_new_thread([&] {
    const Stream side = rt.side_stream(1, StreamPurpose::kStagedCopies);
    const Stream loader = rt.side_stream(1, StreamPurpose::kDataLoader);
    void* block = rt.allocate(1, 64, side);
    std::vector<float> host(16, 2.0f), back(16, 0.0f);
    rt.copy(block, kCuda1, host.data(), kCPU, 64, side);
    rt.fill_bytes(block, 0, 4, loader);
    rt.copy(back.data(), kCPU, block, kCuda1, 64, side);
    EXPECT_EQ(back[1], 2.0f);
    const Event e = rt.record(side);
    EXPECT_TRUE(rt.query(e));
    rt.synchronize(e, std::chrono::seconds(1), "test");
    rt.wait(rt.default_stream(1), e);
    rt.wait(loader, e);
    rt.record_stream(1, block, loader);
    rt.deallocate(1, block);
    rt.empty_cache();
    (void)rt.memory_stats(1);
  });
  EXPECT_EQ(api.contexts(), std::set<int>{1}) << joined(api.context_makers());
  EXPECT_TRUE(api.calls_with_current(0).empty()) << joined(api.calls_with_current(0));
  EXPECT_TRUE(api.misuses().empty()) << joined(api.misuses());
}

// Core's DeviceScope over this runtime: the previous device comes back where
// it has a context, and a thread that never chose one stays on the scope's.
TEST(CudaRuntimeDevices, ADeviceScopeRestoresOnlyADeviceWithAContext) {
  FakeCudaApi api(2);
  CudaRuntime rt(api, false);
  on_new_thread([&] {
    {
      DeviceScope scope(rt, 1);
      EXPECT_EQ(rt.current_device(), 1);
    }
    EXPECT_EQ(rt.current_device(), 1) << "selecting cuda:0 again would create its context";
  });
  EXPECT_EQ(api.contexts(), std::set<int>{1}) << joined(api.context_makers());
  on_new_thread([&] {
    rt.set_device(0);
    {
      DeviceScope scope(rt, 1);
      EXPECT_EQ(rt.current_device(), 1);
    }
    EXPECT_EQ(rt.current_device(), 0);
  });
}

TEST(CudaRuntimeDevices, TheFakeRefusesAnEventRecordedOnAnotherDevicesStream) {
  // The fake itself: without this a runtime that forgot a device would pass.
  FakeCudaApi api(2);
  cudaStream_t s = nullptr;
  ASSERT_EQ(api.set_device(1), cudaSuccess);
  ASSERT_EQ(api.stream_create(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(api.set_device(0), cudaSuccess);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(api.event_create(&e, 0), cudaSuccess);
  EXPECT_NE(api.event_record(e, s), cudaSuccess);
  EXPECT_EQ(api.misuses().size(), 1u) << joined(api.misuses());
  EXPECT_EQ(api.contexts(), (std::set<int>{0, 1}));
}

TEST(CudaRuntimeStreams, EachPurposeHasItsOwnStreams) {
  FakeCudaApi api(2);
  CudaRuntime rt(api, false);
  const Stream loader = rt.side_stream(1, StreamPurpose::kDataLoader);
  const Stream staged = rt.side_stream(1, StreamPurpose::kStagedCopies);
  const Stream group_a = rt.side_stream(1, StreamPurpose::kCollectives);
  const Stream group_b = rt.side_stream(1, StreamPurpose::kCollectives);
  std::set<void*> handles{loader.handle, staged.handle, group_a.handle, group_b.handle};
  std::set<uint64_t> ids{loader.id, staged.id, group_a.id, group_b.id};
  std::vector<Stream> user;
  for (int i = 0; i < CudaRuntime::kUserStreams; ++i) {
    user.push_back(rt.new_stream(1));
    handles.insert(user.back().handle);
    ids.insert(user.back().id);
  }
  const size_t n = 4 + CudaRuntime::kUserStreams;
  EXPECT_EQ(handles.size(), n) << "two purposes, or two groups, share a stream";
  EXPECT_EQ(ids.size(), n);
  EXPECT_EQ(ids.count(0), 0u) << "id 0 is the default stream";
  EXPECT_FALSE(handles.count(nullptr));

  // Shared by their users: every data loader copies on one stream.
  EXPECT_EQ(rt.side_stream(1, StreamPurpose::kDataLoader), loader);
  EXPECT_EQ(rt.side_stream(1, StreamPurpose::kStagedCopies), staged);
  // The program's pool goes round.
  EXPECT_EQ(rt.new_stream(1), user[0]);
  // Another device has streams of its own.
  EXPECT_NE(rt.side_stream(0, StreamPurpose::kDataLoader).handle, loader.handle);

  // A released group stream goes to the next group, and only then; a shared
  // stream given back stays with its purpose.
  rt.release_stream(group_a);
  rt.release_stream(loader);
  const Stream group_c = rt.side_stream(1, StreamPurpose::kCollectives);
  EXPECT_EQ(group_c, group_a);
  EXPECT_NE(rt.side_stream(1, StreamPurpose::kCollectives), group_b);
  EXPECT_NE(rt.side_stream(1, StreamPurpose::kCollectives), loader);
  EXPECT_TRUE(api.misuses().empty()) << joined(api.misuses());
}

// Workspaces are per thread and stream (on core's fake device: no CUDA call).
TEST(CudaRuntimeWorkspace, EachStreamHasItsOwnAndReusesIt) {
  cohort::testing::FakeCudaDevice fake(1);
  // On a thread of its own: its workspaces go with it, while the fake lives.
  on_new_thread([&] {
    const Device d(DeviceType::kCUDA, 0);
    const Stream a = fake.side_stream(0, StreamPurpose::kUser);
    const Stream b = fake.side_stream(0, StreamPurpose::kUser);
    void* on_a = workspace(a, 1024);
    void* on_b = workspace(b, 1024);
    void* on_default = workspace(d, 1024);
    EXPECT_NE(on_a, on_b) << "two streams share scratch";
    EXPECT_NE(on_a, on_default);
    EXPECT_NE(on_b, on_default);
    EXPECT_EQ(workspace(a, 512), on_a) << "one stream's buffer is reused";
    EXPECT_EQ(workspace(a, 1024), on_a);
    {
      StreamGuard guard(b);
      EXPECT_EQ(workspace(d, 1024), on_b) << "the device form uses the current stream's";
    }
    void* grown = workspace(a, 4096);
    EXPECT_NE(grown, on_b);
    EXPECT_EQ(workspace(a, 4096), grown);
    EXPECT_EQ(workspace(b, 1024), on_b) << "growing one stream's leaves the others";
  });
  EXPECT_EQ(fake.memory_stats(0).allocated, 0u) << "a thread's workspaces go with it";
}

}  // namespace
}  // namespace cohort::cuda
