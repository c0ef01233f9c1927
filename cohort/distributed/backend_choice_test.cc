// The backend and device choice of a job's workers (backend_choice.h), on the
// CPU: the device runtime is core's fake (core/fake_device_testing.h).
#include "cohort/distributed/backend_choice.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/core/fake_device_testing.h"

namespace cohort::distributed {
namespace {

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

TEST(ChooseBackend, NcclWhenEveryLocalRankHasItsOwnGpu) {
  for (int ranks : {1, 2, 8}) {
    BackendChoice c = choose_backend(DeviceType::kCUDA, ranks, 8, true);
    EXPECT_EQ(c.kind, BackendKind::kNccl) << ranks;
    EXPECT_TRUE(contains(c.reason, "own GPU")) << c.reason;
  }
}

TEST(ChooseBackend, NativeWhenRanksShareAGpuNamingWhy) {
  BackendChoice c = choose_backend(DeviceType::kCUDA, 2, 1, true);
  EXPECT_EQ(c.kind, BackendKind::kNative);
  EXPECT_EQ(c.reason,
            "2 local ranks share 1 GPU: NCCL refuses two ranks on one GPU; native stages CUDA "
            "tensors through host memory");
  c = choose_backend(DeviceType::kCUDA, 3, 2, true);
  EXPECT_EQ(c.kind, BackendKind::kNative);
  EXPECT_TRUE(contains(c.reason, "3 local ranks share 2 GPUs")) << c.reason;
}

TEST(ChooseBackend, NativeWithoutNcclOrWithoutAGpuOrOnTheCpu) {
  BackendChoice c = choose_backend(DeviceType::kCUDA, 1, 1, false);
  EXPECT_EQ(c.kind, BackendKind::kNative);
  EXPECT_TRUE(contains(c.reason, "this build has no NCCL")) << c.reason;
  c = choose_backend(DeviceType::kCUDA, 1, 0, true);
  EXPECT_EQ(c.kind, BackendKind::kNative);
  EXPECT_TRUE(contains(c.reason, "no GPU")) << c.reason;
  c = choose_backend(DeviceType::kCPU, 2, 8, true);
  EXPECT_EQ(c.kind, BackendKind::kNative);
  EXPECT_EQ(c.reason, "CPU tensors");
}

TEST(WorkerDevice, CudaWithoutIndexIsLocalRankModuloTheDeviceCount) {
  const Device cuda(DeviceType::kCUDA);
  EXPECT_EQ(worker_device(cuda, 0, 2), Device(DeviceType::kCUDA, 0));
  EXPECT_EQ(worker_device(cuda, 1, 2), Device(DeviceType::kCUDA, 1));
  EXPECT_EQ(worker_device(cuda, 3, 2), Device(DeviceType::kCUDA, 1));
  EXPECT_EQ(worker_device(cuda, 1, 1), Device(DeviceType::kCUDA, 0));  // ranks share one GPU
}

TEST(WorkerDevice, ExplicitIndexAndCpuAreKept) {
  EXPECT_EQ(worker_device(Device("cuda:1"), 0, 2), Device(DeviceType::kCUDA, 1));
  EXPECT_EQ(worker_device(Device("cuda:0"), 5, 2), Device(DeviceType::kCUDA, 0));
  EXPECT_EQ(worker_device(kCPU, 3, 0), kCPU);
}

TEST(WorkerDevice, CudaWithoutDevicesAndBadLocalRanksFail) {
  try {
    worker_device(Device("cuda"), 1, 0);
    FAIL() << "no error";
  } catch (const NotSupported& e) {
    EXPECT_TRUE(contains(e.what(), "local rank 1")) << e.what();
    EXPECT_TRUE(contains(e.what(), "no cuda device")) << e.what();
  }
  EXPECT_THROW(worker_device(kCPU, -1, 1), InvalidArgument);
}

TEST(SetWorkerCudaDevice, MakesLocalRankModuloCountCurrent) {
  testing::FakeCudaDevice fake(2);
  EXPECT_EQ(set_worker_cuda_device(3), 1);
  EXPECT_EQ(fake.current_device(), 1);
  EXPECT_EQ(set_worker_cuda_device(0), 0);
  EXPECT_EQ(fake.current_device(), 0);
}

TEST(SetWorkerCudaDevice, NoUsableDeviceIsNamed) {
  testing::FakeCudaDevice fake(0);
  try {
    set_worker_cuda_device(0);
    FAIL() << "no error";
  } catch (const NotSupported& e) {
    EXPECT_TRUE(contains(e.what(), "choosing this worker's GPU")) << e.what();
    EXPECT_TRUE(contains(e.what(), "the fake has no devices")) << e.what();
  }
}

std::string file_store_path(const char* what) {
  std::string path = fmt::format("/tmp/cohort-{}-{}", what, ::getpid());
  ::unlink(path.c_str());
  return path;
}

// Two ranks on threads, placed as a host of two GPUs places them: each on its
// own device, the placement from the bootstrap (no LOCAL_RANK: one host).
TEST(InitWorkerGroup, EachRankGetsItsDeviceAndTheGroupWorks) {
  testing::FakeCudaDevice fake(2);
  const std::string path = file_store_path("worker-group");
  std::vector<WorkerGroup> w(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      w[r] = init_worker_group("native", Device("cuda"),
                               fmt::format("file://{}?rank={}&world_size=2", path, r),
                               std::chrono::seconds(30));
      Tensor t = Tensor::full({2}, static_cast<double>(r + 1));
      w[r].group->all_reduce(t);
      EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(w[r].group, nullptr);
    EXPECT_EQ(w[r].device, Device(DeviceType::kCUDA, r));
    EXPECT_EQ(w[r].local_rank, r);
    EXPECT_EQ(w[r].local_world_size, 2);
    EXPECT_EQ(w[r].backend.kind, BackendKind::kNative);
    EXPECT_EQ(w[r].backend.reason, "asked for");
  }
  for (auto& g : w) destroy_process_group(g.group);
  ::unlink(path.c_str());
}

TEST(InitWorkerGroup, AutoOnTheCpuIsNative) {
  const std::string path = file_store_path("worker-group-cpu");
  WorkerGroup w = init_worker_group("auto", kCPU, "file://" + path + "?rank=0&world_size=1",
                                    std::chrono::seconds(30));
  EXPECT_EQ(w.device, kCPU);
  EXPECT_EQ(w.backend.kind, BackendKind::kNative);
  EXPECT_EQ(w.backend.reason, "CPU tensors");
  destroy_process_group(w.group);
  ::unlink(path.c_str());
}

TEST(InitWorkerGroup, AutoWithCudaExplainsTheChoice) {
  // Two ranks on one GPU: native, whether or not this build has NCCL.
  testing::FakeCudaDevice fake(1);
  const std::string path = file_store_path("worker-group-auto");
  std::vector<WorkerGroup> groups(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      groups[static_cast<size_t>(r)] = init_worker_group(
          "auto", Device("cuda"), fmt::format("file://{}?rank={}&world_size=2", path, r),
          std::chrono::seconds(30));
    });
  }
  for (auto& t : ranks) t.join();
  for (WorkerGroup& w : groups) {
    ASSERT_NE(w.group, nullptr);
    EXPECT_EQ(w.device, Device(DeviceType::kCUDA, 0));
    EXPECT_EQ(w.local_world_size, 2);
    EXPECT_EQ(w.backend.kind, BackendKind::kNative);
    const char* why = backend_available(BackendKind::kNccl) ? "2 local ranks share 1 GPU"
                                                            : "this build has no NCCL";
    EXPECT_TRUE(contains(w.backend.reason, why)) << w.backend.reason;
  }
  EXPECT_EQ(fake.current_device(), 0);
  for (WorkerGroup& w : groups) destroy_process_group(w.group);
  ::unlink(path.c_str());
}

TEST(InitWorkerGroup, UnknownBackendIsNamed) {
  EXPECT_THROW(init_worker_group("gloo", kCPU, "env://"), InvalidArgument);
}

}  // namespace
}  // namespace cohort::distributed
