// A ZeRO sharded checkpoint written from a device resumes on the CPU, and one
// written on the CPU resumes on a device: two ranks on threads, the fake CUDA
// device with the CPU kernels behind its tables standing for the GPU (what is
// checked is where the shards live and how they cross, not CUDA kernels).
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include "cohort/autograd/ops.h"
#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/checkpoint/zero_checkpoint.h"
#include "cohort/core/fake_device_kernels_testing.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/adam.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;
const Device kCuda(DeviceType::kCUDA, 0);

struct ZeroRun {
  std::shared_ptr<nn::ToyModel> model;
  std::unique_ptr<parallel::ShardedDataParallel> zero;
  std::unique_ptr<parallel::ShardedOptimizer> opt;
};

ZeroRun make_run(std::shared_ptr<distributed::ProcessGroup> pg, Device device, uint64_t seed) {
  ZeroRun r;
  Generator gen(seed);
  r.model = std::make_shared<nn::ToyModel>(gen);
  r.model->to(device);
  r.zero = std::make_unique<parallel::ShardedDataParallel>(r.model, pg,
                                                           parallel::ZeroOptions{.stage = 2});
  r.opt = std::make_unique<parallel::ShardedOptimizer>(
      *r.zero, std::make_unique<optim::Adam>(r.zero->shard_parameters(), optim::AdamOptions{}));
  return r;
}

void train(ZeroRun& r, int rank, int steps) {
  for (int s = 0; s < steps; ++s) {
    Generator gen(50 + static_cast<uint64_t>(s * 2 + rank));
    Tensor x = randn({4, 10}, gen).to(r.model->net1().weight().device());
    Tensor y = randn({4, 5}, gen).to(x.device());
    r.opt->zero_grad();
    r.zero->forward_with([&](nn::Module& m) { return mse_loss(m(x), y); }).backward();
    r.opt->step();
  }
}

TEST(ZeroCheckpointDevice, ShardsWrittenOnADeviceResumeOnTheCpuAndBack) {
  const fs::path root = fs::temp_directory_path() / ("cohort_zero_dev_" + std::to_string(getpid()));
  fs::remove_all(root);
  cohort::testing::FakeCudaDevice fake;
  cohort::testing::FakeDeviceKernels kernels;
  distributed::testing::run_ranks_named(
      "zckpt", 2, [&](std::shared_ptr<distributed::ProcessGroup> pg) {
        // Trained on the device, saved, then one more step there: the reference.
        ZeroRun dev = make_run(pg, kCuda, 1);
        train(dev, pg->rank(), 2);
        const std::string path =
            save_zero_checkpoint(*dev.opt, (root / "dev").string(), {.step = 2});
        // Resumed on the CPU from other weights: the same parameters, and the
        // same next step (Adam's moments came back too).
        ZeroRun cpu = make_run(pg, kCPU, 9);
        load_zero_checkpoint(*open_checkpoint(path), *cpu.opt);
        train(dev, pg->rank(), 1);
        train(cpu, pg->rank(), 1);
        const auto a = dev.model->named_parameters(), b = cpu.model->named_parameters();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_TRUE(a[i].second.is_cuda());
          EXPECT_TRUE(allclose(a[i].second.cpu(), b[i].second, 1e-5, 1e-7)) << a[i].first;
        }
        // And back: the CPU run's checkpoint onto a device.
        const std::string back =
            save_zero_checkpoint(*cpu.opt, (root / "cpu").string(), {.step = 3});
        ZeroRun again = make_run(pg, kCuda, 5);
        load_zero_checkpoint(*open_checkpoint(back), *again.opt);
        const auto c = again.model->named_parameters();
        for (size_t i = 0; i < c.size(); ++i) {
          EXPECT_TRUE(c[i].second.is_cuda()) << c[i].first;
          EXPECT_TRUE(allclose(c[i].second.cpu(), b[i].second, 0, 0)) << c[i].first;
        }
      });
  fs::remove_all(root);
}

}  // namespace
}  // namespace cohort::checkpoint
