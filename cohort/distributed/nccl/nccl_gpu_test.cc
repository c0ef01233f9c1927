// The nccl backend over the real NCCL on a GPU (cohort_nccl_tests, ctest
// label cuda; skipped where no CUDA device is usable). One rank: NCCL refuses
// two ranks of one process on one GPU, so multi-rank runs are the GPU check
// script's (one process per rank). Every op of the op table runs on CUDA
// tensors through a world-1 group, and the watchdog sees the ops end. The
// loader's test needs no GPU (it only opens the library).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "cohort/core/device_runtime.h"
#include "cohort/core/tensor.h"
#include "cohort/distributed/nccl/nccl_backend.h"
#include "cohort/distributed/nccl/nccl_library.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::distributed {
namespace {

const Device kCuda(DeviceType::kCUDA, 0);

std::vector<float> values(const Tensor& t) {
  return t.cpu().to(DType::kFloat32).to_vector<float>();
}

bool skip_without_gpu(std::string& why) {
  DeviceRuntime* rt = find_device_runtime(DeviceType::kCUDA);
  if (rt == nullptr) {
    why = "the CUDA layer is not registered";
    return true;
  }
  if (rt->device_count() == 0) {
    why = "no CUDA device: " + rt->unavailable_reason();
    return true;
  }
  return false;
}

TEST(NcclLibrary, OpensOnFirstUseAndResolvesEveryFunction) {
  const detail::NcclLibrary& lib = detail::nccl_library();
  EXPECT_GE(lib.version, NCCL_VERSION(2, 14, 0)) << "the loaded libnccl is older than cohort needs";
  EXPECT_NE(lib.group_end, nullptr);
  EXPECT_STREQ(lib.get_error_string(ncclSuccess), "no error");
  EXPECT_EQ(&detail::nccl_library(), &lib) << "opened once";
}

TEST(NcclGpu, OneRankRunsEveryOpOnCudaTensors) {
  std::string why;
  if (skip_without_gpu(why)) GTEST_SKIP() << why;
  auto store = std::make_shared<rendezvous::HashStore>();
  ProcessGroupOptions o;
  o.name = "nccl-gpu";
  o.timeout = std::chrono::seconds(60);
  o.device_index = 0;
  auto pg = ProcessGroup::create(BackendKind::kNccl, store, 0, 1, o);
  ASSERT_EQ(pg->backend(), BackendKind::kNccl);

  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3}).to(kCuda);
  pg->all_reduce(t);
  EXPECT_EQ(values(t), (std::vector<float>{1, 2, 3}));
  Tensor h = Tensor::full({4}, 1.5, DType::kBFloat16, kCuda);
  pg->all_reduce(h, {.op = ReduceOp::kAvg});
  EXPECT_EQ(values(h), std::vector<float>(4, 1.5f));
  pg->all_reduce(t, {.op = ReduceOp::kMax});
  pg->broadcast(t);
  pg->reduce(t, {.op = ReduceOp::kProduct});
  EXPECT_EQ(values(t), (std::vector<float>{1, 2, 3}));

  Tensor all = Tensor::zeros({3}, DType::kFloat32, kCuda);
  pg->all_gather_into_tensor(all, t);
  EXPECT_EQ(values(all), (std::vector<float>{1, 2, 3}));
  Tensor mine = Tensor::zeros({3}, DType::kFloat32, kCuda);
  pg->reduce_scatter_tensor(mine, t, {.op = ReduceOp::kMin});
  EXPECT_EQ(values(mine), (std::vector<float>{1, 2, 3}));
  Tensor swapped = Tensor::zeros({3}, DType::kFloat32, kCuda);
  pg->all_to_all_single(swapped, t);
  EXPECT_EQ(values(swapped), (std::vector<float>{1, 2, 3}));
  pg->barrier();

  Work w = pg->all_reduce(t, {}, async_op);
  w.wait();
  synchronize_device(kCuda, "nccl gpu test");
  EXPECT_TRUE(w.is_completed());
  const std::string record = pg->flight_record();
  EXPECT_NE(record.find("all_to_all"), std::string::npos) << record;
  EXPECT_NE(record.find("completed"), std::string::npos) << record;
}

TEST(NcclGpu, GatherAndScatterAreGroupedSendRecv) {
  std::string why;
  if (skip_without_gpu(why)) GTEST_SKIP() << why;
  auto store = std::make_shared<rendezvous::HashStore>();
  ProcessGroupOptions o;
  o.name = "nccl-gpu-p2p";
  o.timeout = std::chrono::seconds(60);
  o.device_index = 0;
  auto backend = NcclBackend::create(store, 0, 1, o);
  DeviceRuntime& rt = device_runtime(kCuda, "nccl gpu test");
  Tensor src = Tensor::from_vector<float>({4, 5}, {2}).to(kCuda);
  Tensor dst = Tensor::zeros({2}, DType::kFloat32, kCuda);
  for (OpKind kind : {OpKind::kGather, OpKind::kScatter}) {
    OpArgs a;
    a.kind = kind;
    a.send = src.device_data();
    a.recv = dst.device_data();
    a.count = 2;
    a.timeout = std::chrono::seconds(30);
    DeviceOpContext ctx{kCuda,
                        current_stream(kCuda),
                        rt.record(current_stream(kCuda)),
                        {src.storage()->data(), dst.storage()->data()}};
    DeviceCompletion done = backend->run_on_device(a, ctx);
    rt.synchronize(done.end, std::chrono::seconds(30), "gather/scatter");
    done.check();
    EXPECT_EQ(values(dst), (std::vector<float>{4, 5}));
    dst.zero_();
  }
}

}  // namespace
}  // namespace cohort::distributed
