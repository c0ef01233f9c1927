#include "cohort/core/device.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/core/device_dispatch.h"
#include "cohort/core/fake_device_testing.h"
#include "cohort/core/native/index.h"

namespace cohort {
namespace {

TEST(Device, ParsesTorchSpellings) {
  EXPECT_TRUE(Device("cpu").is_cpu());
  EXPECT_EQ(Device("cuda"), Device(DeviceType::kCUDA));
  EXPECT_FALSE(Device("cuda").has_index());
  EXPECT_EQ(Device("cuda:3").index(), 3);
  EXPECT_EQ(Device("cuda:12").str(), "cuda:12");
  EXPECT_EQ(Device(DeviceType::kCPU, 4).index(), -1);
  EXPECT_EQ(kCPU.str(), "cpu");
}

TEST(Device, RejectsOtherSpellingsNamingTheAcceptedOnes) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CUDA", "cpu:0"}) {
    try {
      Device d(bad);
      FAIL() << bad << " was accepted as " << d.str();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'cpu', 'cuda' or 'cuda:N'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(DeviceRuntimeRegistry, WithoutADeviceLayerSaysTheBuildLacksCuda) {
  DeviceRuntime* saved = find_device_runtime(DeviceType::kCUDA);
  register_device_runtime(DeviceType::kCUDA, nullptr);
  try {
    Tensor::empty({2}, DType::kFloat32, Device("cuda:0"));
    FAIL() << "allocated on a device with no runtime";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("built without"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  register_device_runtime(DeviceType::kCUDA, saved);
}

TEST(DeviceRuntimeRegistry, NoDeviceAndIndexPastTheCountAreNamed) {
  {
    testing::FakeCudaDevice none(0);
    EXPECT_THROW(
        {
          try {
            Tensor::zeros({2}, DType::kFloat32, Device("cuda"));
          } catch (const NotSupported& e) {
            EXPECT_NE(std::string(e.what()).find("not available"), std::string::npos);
            throw;
          }
        },
        NotSupported);
  }
  testing::FakeCudaDevice one(1);
  try {
    Tensor::zeros({2}, DType::kFloat32, Device("cuda:1"));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sees 1 CUDA device"), std::string::npos) << e.what();
  }
}

TEST(DeviceTensor, MovesBetweenDevicesAndBack) {
  testing::FakeCudaDevice fake;
  Tensor x = Tensor::arange(0.0, 12.0, 1.0).view({3, 4});
  Tensor d = x.cuda();
  EXPECT_EQ(d.device(), Device("cuda:0"));
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.sizes(), x.sizes());
  EXPECT_TRUE(x.to(kCPU).is_same(x));  // already there: the same handle
  EXPECT_TRUE(d.to(Device("cuda:0")).is_same(d));
  Tensor back = d.cpu();
  EXPECT_TRUE(back.is_cpu());
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
  // A strided source and a converting destination cross through dense copies.
  Tensor t = x.transpose(0, 1).to(Device("cuda:0"), DType::kFloat64);
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_EQ(t.to_vector<double>(), x.transpose(0, 1).to(DType::kFloat64).to_vector<double>());
  EXPECT_FLOAT_EQ(d.select(0, 2).select(0, 1).item<float>(), 9.0f);
}

TEST(DeviceTensor, FactoriesFillOnTheDevice) {
  testing::FakeCudaDevice fake;
  EXPECT_EQ(Tensor::zeros({4}, DType::kFloat32, Device("cuda")).to_vector<float>(),
            std::vector<float>(4, 0.0f));
  EXPECT_EQ(Tensor::full({2, 2}, 2.5, DType::kFloat32, Device("cuda")).to_vector<float>(),
            std::vector<float>(4, 2.5f));
  Tensor d = Tensor::ones({3}, DType::kInt64, Device("cuda:0"));
  Tensor c = d.clone();
  EXPECT_EQ(c.device(), d.device());
  EXPECT_EQ(c.to_vector<int64_t>(), std::vector<int64_t>(3, 1));
}

TEST(DeviceTensor, CpuCodeGivenDeviceMemoryFailsNamingTheDevice) {
  testing::FakeCudaDevice fake;
  Tensor d = Tensor::zeros({2, 3}, DType::kFloat32, Device("cuda:0"));
  try {
    d.data_ptr<float>();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(".cpu()"), std::string::npos) << e.what();
  }
  EXPECT_NE(d.device_ptr<float>(), nullptr);
}

TEST(DeviceDispatch, TensorsOnTwoDevicesAreNamedBoth) {
  testing::FakeCudaDevice fake;
  Tensor a = Tensor::zeros({2});
  Tensor b = Tensor::zeros({2}, DType::kFloat32, Device("cuda:0"));
  EXPECT_EQ(op_device("add", {&b, &b}), Device("cuda:0"));
  EXPECT_EQ(op_device("add", {&a, nullptr}), kCPU);
  try {
    op_device("add", {&a, &b});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("add: expected all tensors to be on the same device, "
                                         "but found at least two devices, cpu and cuda:0"),
              std::string::npos)
        << e.what();
  }
  Tensor s = Tensor::scalar(2.0);
  EXPECT_EQ(op_device("mul", {&b, &s}, /*cpu_scalars_ok=*/true), Device("cuda:0"));
}

TEST(DeviceDispatch, AnOpWithoutAKernelSaysSo) {
  testing::FakeCudaDevice fake;
  DeviceOp<Tensor(const Tensor&)> op("frobnicate");
  Tensor b = Tensor::zeros({2}, DType::kFloat32, Device("cuda:0"));
  try {
    op(b.device(), b);
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("frobnicate: no kernel for cuda:0"), std::string::npos)
        << e.what();
  }
  op.set(DeviceType::kCUDA, [](const Tensor& t) { return t; });
  EXPECT_TRUE(op(b.device(), b).is_same(b));
}

TEST(DeviceStreams, CurrentStreamIsPerThreadAndRestoredByTheGuard) {
  testing::FakeCudaDevice fake;
  Device d("cuda:0");
  EXPECT_EQ(current_stream(d).id, 0u);
  Stream side = fake.new_stream(0);
  {
    StreamGuard guard(side);
    EXPECT_EQ(current_stream(d), side);
    std::thread([&] { EXPECT_EQ(current_stream(d).id, 0u); }).join();
  }
  EXPECT_EQ(current_stream(d).id, 0u);
}

TEST(DeviceStreams, SynchronizeTimesOutNamingTheWait) {
  RuntimeOptions o = Runtime::process().options();
  o.device_wait_timeout_s = 0.5;
  RuntimeOptionsGuard timeout(o);
  EXPECT_EQ(device_wait_timeout(), std::chrono::milliseconds(500));
  testing::FakeCudaDevice fake;
  fake.memory().complete_events = false;
  EXPECT_THROW(synchronize_device(Device("cuda:0"), "test wait"), TimeoutError);
}

}  // namespace
}  // namespace cohort

namespace cohort {
namespace {

// cat is copy_ into narrow views of an output on the inputs' device, so it
// runs wherever copy_ has a kernel; inputs on two devices are refused.
TEST(DeviceTensor, CatGathersOnTheInputsDeviceAndRefusesTwoDevices) {
  testing::FakeCudaDevice fake;
  Tensor a = Tensor::arange(0.0, 4.0, 1.0).view({2, 2});
  Tensor b = Tensor::arange(4.0, 6.0, 1.0).view({2, 1});
  Tensor c = native::cat({a.cuda(), b.cuda()}, 1);
  EXPECT_EQ(c.device(), Device("cuda:0"));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 1, 4, 2, 3, 5}));
  EXPECT_THROW(native::cat({a, b.cuda()}, 1), InvalidArgument);
}

}  // namespace
}  // namespace cohort
