// ProcessGroup ops on device tensors, on the CPU: the fake CUDA device
// (core/fake_device_testing.h) stands for the GPU. Through the native
// backend the buffers are staged through host memory; through a backend that
// runs on the device (a double of the nccl backend's contract here) the op is
// handed over with the issuing stream's event and the Work orders the
// waiting stream after the op's end.
#include <gtest/gtest.h>

#include <atomic>

#include "cohort/base/error.h"
#include "cohort/core/fake_device_testing.h"
#include "cohort/distributed/process_group.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::distributed {
namespace {

using testing::run_ranks;

const Device kCuda(DeviceType::kCUDA, 0);

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<float> values(const Tensor& t) { return t.cpu().to_vector<float>(); }

TEST(ProcessGroupDevice, NativeStagesDeviceTensorsThroughTheHost) {
  cohort::testing::FakeCudaDevice fake;
  // The fake's device memory is host memory, so only the copies show the staging.
  const int to_host = fake.copies_to_host;
  run_ranks(3, [](ProcessGroup& pg) {
    float r = static_cast<float>(pg.rank());
    Tensor t = Tensor::from_vector<float>({r, 2 * r, 1}, {3}).to(kCuda);
    pg.all_reduce(t);
    EXPECT_TRUE(t.is_cuda());
    EXPECT_EQ(values(t), (std::vector<float>{3, 6, 3}));

    Tensor b = Tensor::full({2}, r, DType::kFloat32, kCuda);
    Work w = pg.broadcast(b, {.root = 2}, async_op);
    w.wait();
    EXPECT_TRUE(w.is_completed());
    EXPECT_EQ(values(b), (std::vector<float>{2, 2}));

    Tensor in = Tensor::full({2}, r, DType::kFloat32, kCuda);
    Tensor all = Tensor::zeros({6}, DType::kFloat32, kCuda);
    pg.all_gather_into_tensor(all, in);
    EXPECT_EQ(values(all), (std::vector<float>{0, 0, 1, 1, 2, 2}));

    Tensor shards = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {6}).to(kCuda);
    Tensor mine = Tensor::zeros({2}, DType::kFloat32, kCuda);
    pg.reduce_scatter_tensor(mine, shards, {.op = ReduceOp::kAvg});
    EXPECT_EQ(values(mine), (std::vector<float>{2.0f * pg.rank() + 1, 2.0f * pg.rank() + 2}));

    Tensor msg = Tensor::full({4}, r, DType::kFloat32, kCuda);
    int next = (pg.rank() + 1) % pg.size(), prev = (pg.rank() + 2) % pg.size();
    Work s = pg.send(msg, next, {}, async_op);
    Tensor got = Tensor::zeros({4}, DType::kFloat32, kCuda);
    pg.recv(got, prev);
    s.wait();
    EXPECT_EQ(values(got), std::vector<float>(4, static_cast<float>(prev)));
  });
  // Per rank: five staged inputs (all_reduce, broadcast, all_gather,
  // reduce_scatter, send) and five .cpu() reads.
  EXPECT_GE(fake.copies_to_host - to_host, 3 * (5 + 5));
}

TEST(ProcessGroupDevice, NativeStagesAllToAllVThroughTheHost) {
  cohort::testing::FakeCudaDevice fake;
  run_ranks(3, [](ProcessGroup& pg) {
    const int n = pg.size(), r = pg.rank();
    // Rank r sends r + j elements to rank j: staged buffers sized by the counts.
    std::vector<int64_t> in_splits, out_splits;
    std::vector<float> in, want;
    for (int j = 0; j < n; ++j) {
      in_splits.push_back(r + j);
      out_splits.push_back(j + r);
      for (int e = 0; e < r + j; ++e) in.push_back(10.0f * r + j);
      for (int e = 0; e < j + r; ++e) want.push_back(10.0f * j + r);
    }
    Tensor input = Tensor::from_vector<float>(in, {static_cast<int64_t>(in.size())}).to(kCuda);
    Tensor output = Tensor::zeros({static_cast<int64_t>(want.size())}, DType::kFloat32, kCuda);
    Work w = pg.all_to_all_single(output, input, out_splits, in_splits, {}, async_op);
    w.wait();
    EXPECT_EQ(values(output), want);
  });
}

TEST(ProcessGroupDevice, ErrorsNameTheDevicesAndTheFlatForm) {
  cohort::testing::FakeCudaDevice fake;
  run_ranks(2, [](ProcessGroup& pg) {
    Tensor dev = Tensor::zeros({4}, DType::kFloat32, kCuda);
    Tensor host = Tensor::zeros({2});
    try {
      pg.all_gather_into_tensor(dev, host);
      ADD_FAILURE() << "mixed devices were accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "all_gather")) << e.what();
      EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
      EXPECT_TRUE(contains(e.what(), "cpu")) << e.what();
    }
    std::vector<Tensor> outs{Tensor::zeros({2}, DType::kFloat32, kCuda),
                             Tensor::zeros({2}, DType::kFloat32, kCuda)};
    try {
      pg.all_gather(outs, Tensor::zeros({2}, DType::kFloat32, kCuda));
      ADD_FAILURE() << "a device list was accepted";
    } catch (const NotSupported& e) {
      EXPECT_TRUE(contains(e.what(), "all_gather_into_tensor")) << e.what();
    }
  });
}

// What a backend that runs on the device (nccl) sees and must give back.
class DeviceBackendDouble final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kNccl; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool ops_have_deadlines() const override { return true; }
  std::string transport_name(int) const override { return "self"; }
  void run(const OpArgs&) override { ++host_runs; }
  bool runs_on_device(Device d) const override { return d.is_cuda(); }
  DeviceCompletion run_on_device(const OpArgs& a, const DeviceOpContext& ctx) override {
    ++device_runs;
    last = ctx;
    last_args = a;
    DeviceRuntime& rt = device_runtime(ctx.device, "double");
    DeviceCompletion c;
    c.end = rt.record(rt.new_stream(ctx.device.index()));
    c.check = [this] {
      if (fail) throw TimeoutError("watchdog: all_reduce (seq 2) timed out");
    };
    return c;
  }
  std::unique_ptr<Backend> new_subgroup(const std::vector<int>&, std::shared_ptr<rendezvous::Store>,
                                        const ProcessGroupOptions&) override {
    return nullptr;
  }
  void abort(const std::string&) override {}

  std::atomic<int> host_runs{0}, device_runs{0};
  DeviceOpContext last;
  OpArgs last_args;
  std::atomic<bool> fail{false};
};

TEST(ProcessGroupDevice, ADeviceBackendGetsTheIssuingStreamAndTheWorkOrdersOnItsEnd) {
  cohort::testing::FakeCudaDevice fake;
  auto owned = std::make_unique<DeviceBackendDouble>();
  DeviceBackendDouble* be = owned.get();
  auto pg = ProcessGroup::create(std::move(owned), std::make_shared<rendezvous::HashStore>());

  Tensor t = Tensor::ones({8}, DType::kFloat32, kCuda);
  Stream side = device_runtime(kCuda, "test").new_stream(0);
  StreamGuard guard(side);
  // Blocking: the issuing stream waits on the device; the host did not.
  int waits = fake.waits;
  pg->all_reduce(t);
  EXPECT_EQ(be->device_runs.load(), 1);
  EXPECT_EQ(be->host_runs.load(), 0);
  EXPECT_EQ(be->last.stream, side);
  EXPECT_TRUE(be->last.ready.valid());
  EXPECT_EQ(be->last.blocks, std::vector<void*>{t.storage()->data()});
  EXPECT_EQ(be->last_args.recv, t.device_data());
  EXPECT_EQ(be->last_args.count, 8u);
  EXPECT_EQ(fake.waits - waits, 1);

  // Async: nothing waits until Work::wait, which orders the waiting stream.
  fake.memory().complete_events = false;
  waits = fake.waits;
  Work w = pg->all_reduce(t, {}, async_op);
  EXPECT_EQ(fake.waits - waits, 0);
  EXPECT_FALSE(w.is_completed()) << "the op's end event has not completed";
  w.wait();
  EXPECT_EQ(fake.waits - waits, 1);
  fake.memory().complete_all();
  EXPECT_TRUE(w.is_completed());
  fake.memory().complete_events = true;

  // A failure the watchdog found comes out of wait().
  be->fail = true;
  Work bad = pg->all_reduce(t, {}, async_op);
  EXPECT_THROW(bad.wait(), TimeoutError);
  be->fail = false;
}

}  // namespace
}  // namespace cohort::distributed
