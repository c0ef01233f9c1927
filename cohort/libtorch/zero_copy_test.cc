// The zero-copy path of CUDA torch::Tensors (cuda_tensors.h) on the CPU:
// torch tensors that claim cuda:0 over host memory, which core's fake CUDA
// device takes for device memory, through a handle forced onto zero copy
// (zero_copy_for_testing), at 2 ranks on threads with the native backend.
// The ops reach cohort's device route (process_group_device.cc stages the
// fake device's buffers, counted by the fake's copies to the host) and
// write the torch tensors' own memory; an async op keeps its tensor alive
// after the caller dropped it. A CPU-only LibTorch has no CUDA kernels, so
// what needs them (the list forms' packing) is left to the cuda tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <vector>

#include "cohort/core/fake_device_testing.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/libtorch/process_group.h"

namespace cohort::libtorch {
namespace {

// A torch tensor on cuda:0 over `data` (n floats of host memory); a
// CPU-only LibTorch has no CUDA allocator, so it is assembled by hand.
// `released` counts when LibTorch lets go of the memory.
at::Tensor fake_cuda(float* data, int64_t n, std::atomic<int>* released) {
  c10::DataPtr ptr(
      data, released, [](void* ctx) { static_cast<std::atomic<int>*>(ctx)->fetch_add(1); },
      c10::Device(c10::kCUDA, 0));
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(n) * sizeof(float),
                       std::move(ptr), nullptr, false);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA),
      caffe2::TypeMeta::Make<float>());
  t.unsafeGetTensorImpl()->set_sizes_contiguous({n});
  return t;
}

std::vector<float> full(size_t n, float v) { return std::vector<float>(n, v); }

TEST(LibTorchZeroCopy, OpsOnCudaTensorsWriteTheirOwnMemoryThroughCohortsDeviceRoute) {
  cohort::testing::FakeCudaDevice fake;
  const int to_host = fake.copies_to_host;
  distributed::testing::run_ranks_named(
      "zero-copy", 2, [](std::shared_ptr<distributed::ProcessGroup> group) {
        ProcessGroup pg = zero_copy_for_testing(ProcessGroup(std::move(group)));
        EXPECT_EQ(pg.cuda_tensor_path(), CudaTensorPath::kZeroCopy);
        const int rank = pg.rank();
        const auto r = static_cast<float>(rank);
        std::atomic<int> released{0};

        std::vector<float> a = full(4, r + 1);
        {
          at::Tensor t = fake_cuda(a.data(), 4, &released);
          EXPECT_TRUE(t.is_cuda());
          pg.all_reduce(t);
        }
        EXPECT_EQ(a, full(4, 3));
        EXPECT_EQ(released.load(), 1);

        // Async, the caller's handle dropped at once: the Work keeps it.
        std::vector<float> b = full(1 << 12, 2 * r);
        Work w = pg.all_reduce(fake_cuda(b.data(), 1 << 12, &released), {.op = ReduceOp::kAvg},
                               async_op);
        EXPECT_EQ(released.load(), 1) << "the tensor went while its op was in flight";
        w.wait();
        EXPECT_TRUE(w.is_completed());
        EXPECT_EQ(b, full(1 << 12, 1));

        std::vector<float> c = full(3, r);
        pg.broadcast(fake_cuda(c.data(), 3, &released), {.root = 1});
        EXPECT_EQ(c, full(3, 1));

        std::vector<float> in = full(2, r + 5), all = full(4, 0);
        Work g = pg.all_gather_into_tensor(fake_cuda(all.data(), 4, &released),
                                           fake_cuda(in.data(), 2, &released), {}, async_op);
        g.wait();
        EXPECT_EQ(all, (std::vector<float>{5, 5, 6, 6}));

        std::vector<float> shards = {1, 2, 3, 4}, mine = full(2, 0);
        pg.reduce_scatter_tensor(fake_cuda(mine.data(), 2, &released),
                                 fake_cuda(shards.data(), 4, &released));
        EXPECT_EQ(mine, (std::vector<float>{2.0f + 4 * r, 4.0f + 4 * r}));

        std::vector<float> send = {10 * r, 10 * r + 1}, recv = full(2, -1);
        pg.all_to_all_single(fake_cuda(recv.data(), 2, &released),
                             fake_cuda(send.data(), 2, &released));
        EXPECT_EQ(recv, (std::vector<float>{r, 10 + r}));

        std::vector<float> msg = full(3, 7 + r), got = full(3, 0);
        const int peer = 1 - rank;
        Work s = pg.send(fake_cuda(msg.data(), 3, &released), peer, {}, async_op);
        pg.recv(fake_cuda(got.data(), 3, &released), peer);
        s.wait();
        EXPECT_EQ(got, full(3, 7 + static_cast<float>(peer)));

        // A CPU tensor with a CUDA one is refused, naming both devices.
        std::vector<float> d = full(2, 0);
        try {
          pg.all_gather_into_tensor(torch::zeros({4}), fake_cuda(d.data(), 2, &released));
          ADD_FAILURE() << "two devices were accepted";
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("cpu and cuda:0"));
        }
      });
  // Per rank at least one staged input per op above: cohort moved the
  // "device" bytes itself, as it does for its own CUDA tensors.
  EXPECT_GE(fake.copies_to_host - to_host, 2 * 7);
}

}  // namespace
}  // namespace cohort::libtorch
