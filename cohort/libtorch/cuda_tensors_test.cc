// The CPU-checkable parts of CUDA torch::Tensors in the adapter
// (cuda_tensors.h): the path rule for every environment and this build's
// choice; LibTorch's streams as cohort's (ids apart from cohort's pool); the
// zero-copy wrapper over a tensor's memory keeping the tensor alive (the
// fake CUDA device of core stands for the GPU, its device memory being host
// memory); and the host staging's copies back, at once for a blocking op and
// only in Work::wait() for an async one, at 2 ranks on threads. What needs a
// GPU is in *_cuda_test.cc (binary cohort_libtorch_cuda_tests).
#include "cohort/libtorch/cuda_tensors.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>

#include "cohort/core/fake_device_testing.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/libtorch/process_group.h"

namespace cohort::libtorch {
namespace {

using ::testing::HasSubstr;

CudaTensorEnvironment everything() {
  return CudaTensorEnvironment{.torch_major = 2,
                               .torch_minor = 11,
                               .torch_names_streams = true,
                               .torch_has_cuda = true,
                               .cohort_has_cuda = true,
                               .cohort_devices = 1,
                               .cohort_unavailable = ""};
}

TEST(LibTorchCudaTensors, ZeroCopyNeedsStreamHandlesAndCudaInTorchAndCohortsCudaLayerWithADevice) {
  CudaTensorPathChoice c = choose_cuda_tensor_path(everything());
  EXPECT_EQ(c.path, CudaTensorPath::kZeroCopy) << c.reason;
  EXPECT_THAT(c.reason, HasSubstr("LibTorch 2.11"));

  CudaTensorEnvironment e = everything();
  e.torch_major = 1;
  e.torch_minor = 13;
  e.torch_names_streams = false;
  c = choose_cuda_tensor_path(e);
  EXPECT_EQ(c.path, CudaTensorPath::kHostStaging);
  EXPECT_THAT(c.reason, HasSubstr("LibTorch 1.13 cannot name its current CUDA stream"));
  EXPECT_THAT(c.reason, HasSubstr("native_handle"));
  // The feature decides, not the number.
  e.torch_major = 2;
  e.torch_minor = 10;
  EXPECT_EQ(choose_cuda_tensor_path(e).path, CudaTensorPath::kHostStaging);
  e.torch_names_streams = true;
  EXPECT_EQ(choose_cuda_tensor_path(e).path, CudaTensorPath::kZeroCopy);

  e = everything();
  e.torch_has_cuda = false;
  c = choose_cuda_tensor_path(e);
  EXPECT_EQ(c.path, CudaTensorPath::kHostStaging);
  EXPECT_THAT(c.reason, HasSubstr("built without CUDA"));

  e = everything();
  e.cohort_has_cuda = false;
  c = choose_cuda_tensor_path(e);
  EXPECT_EQ(c.path, CudaTensorPath::kHostStaging);
  EXPECT_THAT(c.reason, HasSubstr("COHORT_WITH_CUDA"));

  e = everything();
  e.cohort_devices = 0;
  e.cohort_unavailable = "no CUDA-capable device is detected";
  c = choose_cuda_tensor_path(e);
  EXPECT_EQ(c.path, CudaTensorPath::kHostStaging);
  EXPECT_THAT(c.reason, HasSubstr("no CUDA-capable device is detected"));

  EXPECT_EQ(cuda_tensor_path_name(CudaTensorPath::kZeroCopy), "zero copy");
  EXPECT_EQ(cuda_tensor_path_name(CudaTensorPath::kHostStaging), "host staging");
}

struct WithHandle {
  void* native_handle() const { return nullptr; }
};
struct WithoutHandle {
  int id() const { return 0; }
};

TEST(LibTorchCudaTensors, StreamHandlesAreDetectedByTheMemberNotTheVersion) {
  EXPECT_TRUE(detail::has_native_handle<WithHandle>);
  EXPECT_FALSE(detail::has_native_handle<WithoutHandle>);
  EXPECT_EQ(detail::torch_names_cuda_streams(), detail::has_native_handle<c10::Stream>);
}

TEST(LibTorchCudaTensors, ThisBuildsChoiceFollowsItsLibTorch) {
  const CudaTensorEnvironment env = cuda_tensor_environment();
  EXPECT_EQ(env.torch_major, TORCH_VERSION_MAJOR);
  EXPECT_EQ(env.torch_minor, TORCH_VERSION_MINOR);
  EXPECT_EQ(env.torch_names_streams, detail::torch_names_cuda_streams());
  if (TORCH_VERSION_MAJOR < 2) {
    EXPECT_FALSE(env.torch_names_streams);  // Debian's 1.13
  }
  EXPECT_EQ(env.torch_has_cuda, c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA));
  EXPECT_EQ(env.cohort_has_cuda, find_device_runtime(DeviceType::kCUDA) != nullptr);
  const CudaTensorPathChoice c = cuda_tensor_path();
  std::printf("LibTorch %d.%d: CUDA tensors take the %s path: %s\n", TORCH_VERSION_MAJOR,
              TORCH_VERSION_MINOR, std::string(cuda_tensor_path_name(c.path)).c_str(),
              c.reason.c_str());
  EXPECT_EQ(c.path, choose_cuda_tensor_path(env).path);
  if (!detail::torch_names_cuda_streams() || !env.torch_has_cuda || env.cohort_devices == 0) {
    EXPECT_EQ(c.path, CudaTensorPath::kHostStaging) << c.reason;
  }
  if (!env.torch_has_cuda) {
    EXPECT_FALSE(torch::cuda::is_available());
  }
}

TEST(LibTorchCudaTensors, TorchStreamsGetIdsApartFromCohortsPoolStreams) {
  const Device cuda0(DeviceType::kCUDA, 0);
  const Stream def = detail::stream_for_torch_handle(cuda0, nullptr);
  EXPECT_EQ(def.id, 0u);  // the default stream is the same stream in both
  EXPECT_EQ(def.handle, nullptr);
  int a = 0, b = 0;
  const Stream sa = detail::stream_for_torch_handle(cuda0, &a);
  const Stream sb = detail::stream_for_torch_handle(cuda0, &b);
  EXPECT_EQ(sa.handle, &a);
  EXPECT_NE(sa.id, sb.id);
  EXPECT_GE(sa.id, uint64_t{1} << 63);  // cohort's pool streams count up from 1
  EXPECT_EQ(sa, detail::stream_for_torch_handle(cuda0, &a));
}

TEST(LibTorchCudaTensors, WithoutATorchStreamTheScopeKeepsCohortsCurrentStream) {
  if (detail::torch_current_stream(0).has_value())
    GTEST_SKIP() << "this LibTorch names its CUDA stream (checked by the cuda tests)";
  cohort::testing::FakeCudaDevice fake;
  const Device cuda0(DeviceType::kCUDA, 0);
  const Stream side = fake.new_stream(0);
  StreamGuard guard(side);
  {
    detail::TorchStreamScope scope(0);
    EXPECT_EQ(current_stream(cuda0), side);
  }
  EXPECT_EQ(current_stream(cuda0), side);
}

TEST(LibTorchCudaTensors, TheZeroCopyWrapperViewsTheTensorsMemoryAndKeepsItAlive) {
  // The fake device's memory is host memory, so a CPU tensor's bytes can
  // stand for a CUDA tensor's.
  cohort::testing::FakeCudaDevice fake;
  auto freed = std::make_shared<std::atomic<bool>>(false);
  std::vector<float> bytes = {1, 2, 3, 4, 5, 6};
  at::Tensor t = at::from_blob(
      bytes.data(), {2, 3}, [freed](void*) { freed->store(true); }, at::kFloat);
  Tensor w = detail::wrap_device_memory(t);
  EXPECT_TRUE(w.is_cuda());
  EXPECT_EQ(w.device(), Device(DeviceType::kCUDA, 0));
  EXPECT_EQ(w.sizes(), (Shape{6}));
  EXPECT_EQ(w.dtype(), DType::kFloat32);
  EXPECT_EQ(w.storage()->data(), bytes.data());
  EXPECT_TRUE(w.storage()->borrowed());
  t.reset();
  EXPECT_FALSE(freed->load()) << "the wrapper must hold the torch tensor";
  w = Tensor();
  EXPECT_TRUE(freed->load()) << "the wrapper must let the torch tensor go";

  EXPECT_EQ(detail::to_cohort_dtype(at::kBFloat16), DType::kBFloat16);
  EXPECT_EQ(detail::to_cohort_dtype(at::kHalf), DType::kFloat16);
  EXPECT_EQ(detail::to_cohort_dtype(at::kByte), DType::kUInt8);
  EXPECT_THROW(detail::to_cohort_dtype(at::kBool), InvalidArgument);
}

// Two ranks on threads, as libtorch::ProcessGroup handles.
void two_ranks(const std::function<void(ProcessGroup&)>& fn) {
  distributed::testing::run_ranks_named("staging", 2,
                                        [&](std::shared_ptr<distributed::ProcessGroup> g) {
                                          ProcessGroup pg(std::move(g));
                                          fn(pg);
                                        });
}

TEST(LibTorchCudaTensors, HostStagingCopiesResultsBackAtOnceOrInWait) {
  two_ranks([](ProcessGroup& pg) {
    const float r = static_cast<float>(pg.rank());
    // Blocking: the result is back when the call returns.
    at::Tensor t = torch::full({4}, r + 1);
    detail::HostStaging s(/*stage_cpu_tensors=*/true);
    at::Tensor host = s.out(t);
    EXPECT_FALSE(host.is_same(t));
    pg.all_reduce(host);
    EXPECT_TRUE(torch::equal(t, torch::full({4}, r + 1))) << "copied back before done()";
    s.done(Work());
    EXPECT_TRUE(torch::equal(t, torch::full({4}, 3.0f)));

    // Async: only Work::wait() copies back, after the op.
    at::Tensor a = torch::full({1 << 12}, 2 * r);
    detail::HostStaging sa(true);
    Work w = sa.done(pg.all_reduce(sa.out(a), {.op = ReduceOp::kAvg}, async_op));
    EXPECT_TRUE(w.defined());
    EXPECT_TRUE(w.work().defined());
    w.wait();
    EXPECT_TRUE(torch::equal(a, torch::full({1 << 12}, 1.0f)));

    // Inputs are not copied back; list outputs are, after the unpacking.
    at::Tensor in = torch::full({2}, r);
    std::vector<at::Tensor> outs = {torch::zeros({2}), torch::zeros({2})};
    detail::HostStaging sg(true);
    at::Tensor in_host = sg.in(in);
    std::vector<at::Tensor> outs_host = sg.out(outs);
    EXPECT_EQ(sg.copies_back(), 2u);
    Work g = sg.done(pg.all_gather(outs_host, in_host, {}, async_op));
    g.wait();
    EXPECT_TRUE(torch::equal(outs[0], torch::zeros({2})));
    EXPECT_TRUE(torch::equal(outs[1], torch::ones({2})));
    EXPECT_TRUE(torch::equal(in, torch::full({2}, r)));
  });
}

TEST(LibTorchCudaTensors, AHandleCanChooseStagingButZeroCopyOnlyWhereAvailable) {
  two_ranks([](ProcessGroup& pg) {
    const CudaTensorPathChoice here = cuda_tensor_path();
    EXPECT_EQ(pg.cuda_tensor_path(), here.path);
    ProcessGroup staged = pg.with_cuda_tensor_path(CudaTensorPath::kHostStaging);
    EXPECT_EQ(staged.cuda_tensor_path(), CudaTensorPath::kHostStaging);
    EXPECT_EQ(staged.group(), pg.group());
    EXPECT_EQ(pg.cuda_tensor_path(), here.path);  // the original handle is unchanged
    ProcessGroup sub = staged.new_group({0, 1});
    EXPECT_EQ(sub.cuda_tensor_path(), CudaTensorPath::kHostStaging);
    if (here.path == CudaTensorPath::kZeroCopy) {
      EXPECT_EQ(staged.with_cuda_tensor_path(CudaTensorPath::kZeroCopy).cuda_tensor_path(),
                CudaTensorPath::kZeroCopy);
    } else {
      try {
        (void)pg.with_cuda_tensor_path(CudaTensorPath::kZeroCopy);
        ADD_FAILURE() << "zero copy was granted where it is not available";
      } catch (const NotSupported& e) {
        EXPECT_THAT(e.what(), HasSubstr("zero copy is not available here"));
        EXPECT_THAT(e.what(), HasSubstr(here.reason));
      }
    }
    // CPU tensors are untouched by the choice.
    at::Tensor t = torch::ones({3});
    staged.all_reduce(t);
    EXPECT_TRUE(torch::equal(t, torch::full({3}, 2.0f)));
  });
}

TEST(LibTorchCudaTensors, AnOpOnTwoDevicesIsRejectedNamingThem) {
  two_ranks([](ProcessGroup& pg) {
    try {
      pg.all_gather_into_tensor(torch::zeros({4}), torch::empty({2}, at::Device(at::kMeta)));
      ADD_FAILURE() << "two devices were accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(),
                  HasSubstr("all_gather_into_tensor: expected all tensors on one device"));
      EXPECT_THAT(e.what(), HasSubstr("cpu and meta"));
    }
    pg.barrier();
  });
}

}  // namespace
}  // namespace cohort::libtorch
