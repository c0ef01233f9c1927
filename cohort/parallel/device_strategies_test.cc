// DistributedDataParallel, ZeRO 1-3, the pipeline and tensor parallelism on
// device tensors: two ranks on threads, each with half of every batch on
// cuda:0, through the native backend (which stages device buffers through
// host memory), must reach the parameters of one CPU process on the whole
// batch. On a machine with a GPU they run on it, with the CUDA kernels
// (scripts/gpu_check.sh runs them there); elsewhere the fake CUDA device
// with the CPU kernels behind its tables (core/fake_device_kernels_testing.h)
// stands for it, which checks the strategies' device plumbing (buckets, flat
// layouts, gather buffers, collectives on the parameters' device) but no
// kernel.
#include <gtest/gtest.h>

#include <optional>

#include "cohort/autograd/ops.h"
#include "cohort/core/fake_device_kernels_testing.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/sequential.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_models.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

namespace cohort::parallel {
namespace {

// The GPU when this machine has one, else the fake device and its kernels.
class DeviceUnderTest {
 public:
  explicit DeviceUnderTest(int devices = 1) {
    DeviceRuntime* cuda = find_device_runtime(DeviceType::kCUDA);
    real_ = cuda != nullptr && cuda->device_count() > 0;
    if (real_) {
      count_ = cuda->device_count();
      return;
    }
    count_ = devices;
    fake_.emplace(devices);
    kernels_.emplace();
  }
  // Device i, or cuda:0 on a machine with fewer GPUs (the tutorial lets
  // ToyMpModel's halves share one GPU).
  Device device(int i) const { return Device(DeviceType::kCUDA, i < count_ ? i : 0); }

 private:
  bool real_ = false;
  int count_ = 1;
  std::optional<cohort::testing::FakeCudaDevice> fake_;
  std::optional<cohort::testing::FakeDeviceKernels> kernels_;
};

const Device kCuda(DeviceType::kCUDA, 0);
constexpr int kSteps = 6;
constexpr int64_t kBatch = 8;
const optim::SGDOptions kSgd{.lr = 0.1, .momentum = 0.9};

// Rank 0's weights for seed 42; other ranks start elsewhere (the wrappers
// broadcast rank 0's).
std::shared_ptr<nn::Sequential> make_model(int rank) {
  Generator gen(rank == 0 ? 42 : 4242 + static_cast<uint64_t>(rank));
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 12, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(12, 3, gen)});
}

std::pair<Tensor, Tensor> batch_of(int step) {
  Generator gen(100 + static_cast<uint64_t>(step));
  return {rand({kBatch, 6}, gen), randint(0, 3, {kBatch}, gen)};
}

// Rows [rank * n, (rank + 1) * n) of the step's batch, on `device`.
std::pair<Tensor, Tensor> shard_of(int step, int rank, int world, Device device) {
  auto [x, y] = batch_of(step);
  const int64_t n = kBatch / world;
  return {x.narrow(0, rank * n, n).contiguous().to(device),
          y.narrow(0, rank * n, n).contiguous().to(device)};
}

Tensor loss_of(nn::Module& m, const Tensor& x, const Tensor& y) {
  return nll_loss(log_softmax(m(x), 1), y);
}

nn::NamedTensors reference() {
  auto model = make_model(0);
  optim::SGD opt(model->parameters(), kSgd);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    loss_of(*model, x, y).backward();
    opt.step();
  }
  return model->named_parameters();
}

void expect_equal(const nn::NamedTensors& got, const nn::NamedTensors& want, int rank,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].second.is_cuda()) << what << ": " << got[i].first << " left the device";
    EXPECT_TRUE(allclose(got[i].second.cpu(), want[i].second, 1e-4, 1e-6))
        << what << " rank " << rank << ": parameter " << got[i].first
        << " differs from one CPU process";
  }
}

TEST(DeviceStrategies, DdpOnADeviceEqualsOneCpuProcess) {
  const nn::NamedTensors want = reference();
  DeviceUnderTest gpu;
  distributed::testing::run_ranks_named(
      "ddp", 2, [&](std::shared_ptr<distributed::ProcessGroup> pg) {
        auto model = make_model(pg->rank());
        model->to(kCuda);
        auto ddp = std::make_shared<DistributedDataParallel>(model, pg);
        EXPECT_TRUE(ddp->reducer().bucket_buffer(0).is_cuda());
        optim::SGD opt(ddp->parameters(), kSgd);
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = shard_of(s, pg->rank(), pg->size(), kCuda);
          opt.zero_grad();
          loss_of(*ddp, x, y).backward();
          opt.step();
        }
        expect_equal(model->named_parameters(), want, pg->rank(), "DDP");
      });
}

TEST(DeviceStrategies, ZeroStagesOneToThreeOnADeviceEqualOneCpuProcess) {
  const nn::NamedTensors want = reference();
  DeviceUnderTest gpu;
  for (int stage = 1; stage <= 3; ++stage) {
    distributed::testing::run_ranks_named(
        fmt::format("zero{}", stage), 2, [&](std::shared_ptr<distributed::ProcessGroup> pg) {
          auto model = make_model(pg->rank());
          model->to(kCuda);
          ShardedDataParallel zero(model, pg, {.stage = stage});
          ShardedOptimizer opt(zero, std::make_unique<optim::SGD>(zero.shard_parameters(), kSgd));
          for (int s = 0; s < kSteps; ++s) {
            auto [x, y] = shard_of(s, pg->rank(), pg->size(), kCuda);
            opt.zero_grad();
            zero.forward_with([&](nn::Module& m) { return loss_of(m, x, y); }).backward();
            opt.step();
          }
          zero.summon_full_params();
          expect_equal(model->named_parameters(), want, pg->rank(),
                       fmt::format("ZeRO stage {}", stage));
        });
  }
}

// The MLP the pipeline and tensor-parallel cases split: flatten, 2 x
// (Linear(12) + ReLU), Linear(3), log_softmax.
std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  Generator gen(seed);
  return nn::make_mlp(gen, {.in_features = 6, .width = 12, .hidden_layers = 2, .classes = 3});
}

struct MlpReference {
  std::vector<double> losses;
  TensorDict params;
};

MlpReference mlp_reference() {
  auto model = make_mlp(7);
  optim::SGD opt(model->parameters(), kSgd);
  MlpReference ref;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    Tensor loss = nll_loss((*model)(x), y);
    loss.backward();
    opt.step();
    ref.losses.push_back(loss.item<double>());
  }
  for (auto& [name, t] : model->named_parameters()) ref.params.insert(name, t.clone());
  return ref;
}

TEST(DeviceStrategies, PipelineOnADeviceEqualsOneCpuProcess) {
  const MlpReference want = mlp_reference();
  DeviceUnderTest gpu;
  distributed::testing::run_ranks_named(
      "pp", 2, [&](std::shared_ptr<distributed::ProcessGroup> pg) {
        auto model = make_mlp(7);
        model->to(kCuda);
        pipeline::Pipeline pipe(model, pipeline::make_pipeline_grid(pg, 2),
                                {.schedule = pipeline::Schedule::k1F1B, .micro_batches = 4});
        optim::SGD opt(pipe.parameters(), kSgd);
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = batch_of(s);  // on the CPU: the pipeline moves micro-batches to its device
          pipe.zero_grad();
          const double loss = pipe.step(x, y, pipeline::nll_loss_fn);
          opt.step();
          EXPECT_NEAR(loss, want.losses[static_cast<size_t>(s)], 1e-5) << "step " << s;
        }
        for (auto& [name, t] : pipe.named_parameters()) {
          EXPECT_TRUE(t.is_cuda()) << name;
          EXPECT_TRUE(allclose(t.cpu(), want.params.at(name), 1e-4, 1e-6))
              << "rank " << pg->rank() << ": " << name;
        }
      });
}

TEST(DeviceStrategies, TensorParallelOnADeviceEqualsOneCpuProcess) {
  const MlpReference want = mlp_reference();
  DeviceUnderTest gpu;
  distributed::testing::run_ranks_named(
      "tp", 2, [&](std::shared_ptr<distributed::ProcessGroup> pg) {
        auto full = make_mlp(7);
        auto model = make_tensor_parallel_mlp(*full, pg);
        model->to(kCuda);
        optim::SGD opt(model->parameters(), kSgd);
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = batch_of(s);
          opt.zero_grad();
          Tensor loss = nll_loss((*model)(x.to(kCuda)), y.to(kCuda));
          loss.backward();
          opt.step();
          EXPECT_NEAR(loss.cpu().item<double>(), want.losses[static_cast<size_t>(s)], 1e-5)
              << "step " << s;
        }
        TensorDict got = full_state_dict(*model, *pg);
        for (const auto& [name, t] : want.params)
          EXPECT_TRUE(allclose(got.at(name).cpu(), t, 1e-4, 1e-6))
              << "rank " << pg->rank() << ": " << name;
      });
}

// The tutorial's ToyMpModel: ToyModel's net1 on one device, net2 on
// another, the activation moved between them inside forward.
class ToyMpModel : public nn::Cloneable<ToyMpModel> {
 public:
  ToyMpModel(Generator& gen, Device dev0, Device dev1)
      : Cloneable("ToyMpModel"), dev0_(dev0), dev1_(dev1) {
    net1_ = register_module("net1", std::make_shared<nn::Linear>(10, 10, gen));
    net2_ = register_module("net2", std::make_shared<nn::Linear>(10, 5, gen));
    net1_->to(dev0);
    net2_->to(dev1);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(net1_(x.to(dev0_)));
    return log_softmax(net2_(h.to(dev1_)), 1);
  }

 private:
  Device dev0_, dev1_;
  nn::Child<nn::Linear> net1_, net2_;
};

std::pair<Tensor, Tensor> toy_batch(int step) {
  Generator gen(300 + static_cast<uint64_t>(step));
  return {randn({kBatch, 10}, gen), randint(0, 5, {kBatch}, gen)};
}

TEST(DeviceStrategies, DdpOverAModelSplitAcrossTwoDevicesEqualsOneCpuProcess) {
  Generator ref_gen(0);
  auto ref = std::make_shared<ToyMpModel>(ref_gen, kCPU, kCPU);
  optim::SGD ref_opt(ref->parameters(), kSgd);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = toy_batch(s);
    ref_opt.zero_grad();
    nll_loss((*ref)(x), y).backward();
    optim::clip_grad_norm(ref->parameters(), 0.5);
    ref_opt.step();
  }
  const nn::NamedTensors want = ref->named_parameters();

  DeviceUnderTest gpu(2);
  const Device cuda1 = gpu.device(1);
  distributed::testing::run_ranks_named(
      "toy", 2, [&](std::shared_ptr<distributed::ProcessGroup> pg) {
        Generator gen(pg->rank() == 0 ? 0 : 77);
        auto model = std::make_shared<ToyMpModel>(gen, kCuda, cuda1);
        DistributedDataParallel ddp(model, pg);
        // One bucket per device: each device's gradients are reduced where they live.
        ASSERT_EQ(ddp.reducer().num_buckets(), 2u);
        EXPECT_EQ(ddp.reducer().bucket_buffer(0).device(), cuda1);
        EXPECT_EQ(ddp.reducer().bucket_buffer(1).device(), kCuda);
        optim::SGD opt(model->parameters(), kSgd);
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = toy_batch(s);
          const int64_t n = kBatch / pg->size();
          opt.zero_grad();
          Tensor out = ddp(x.narrow(0, pg->rank() * n, n).contiguous());
          nll_loss(out, y.narrow(0, pg->rank() * n, n).contiguous().to(cuda1)).backward();
          // The norm over both devices' gradients, each device scaled by it.
          optim::clip_grad_norm(model->parameters(), 0.5);
          opt.step();
        }
        const nn::NamedTensors got = model->named_parameters();
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(allclose(got[i].second.cpu(), want[i].second, 1e-4, 1e-6))
              << "rank " << pg->rank() << ": " << got[i].first;
      });
}

}  // namespace
}  // namespace cohort::parallel
