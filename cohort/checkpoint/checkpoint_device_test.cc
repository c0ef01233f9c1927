// Checkpoints are device-independent: written from a model and optimizer on a
// device, they load on the CPU, and a CPU checkpoint loads onto a device, with
// the same values (the fake device stands in for a GPU: what is checked is
// the movement through the CPU, not CUDA kernels).
#include <gtest/gtest.h>

#include <filesystem>

#include "cohort/autograd/ops.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/core/fake_device_testing.h"
#include "cohort/core/random.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/sgd.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("cohort_ckpt_device_" + std::to_string(getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

void expect_equal_on_cpu(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [name, t] : a) {
    EXPECT_EQ(t.cpu().to_vector<float>(), b.at(name).cpu().to_vector<float>()) << name;
  }
}

TEST(CheckpointDevice, ACpuCheckpointLoadsOntoADeviceAndBack) {
  testing::FakeCudaDevice fake;
  TempDir dir;
  Generator g(1), h(2);
  nn::ToyModel cpu_model(g);
  optim::SGD cpu_opt(cpu_model.parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor x = Tensor::ones({4, 10});
  cpu_opt.zero_grad();
  sum(cpu_model.forward(x)).backward();
  cpu_opt.step();  // a momentum buffer in the optimizer's state
  std::string saved = save_checkpoint(dir.path.string(), cpu_model, &cpu_opt, {.step = 1});

  nn::ToyModel dev_model(h);
  dev_model.to(Device("cuda:0"));
  optim::SGD dev_opt(dev_model.parameters(), {.lr = 0.05, .momentum = 0.9});
  TrainingState st = load_checkpoint(saved, dev_model, &dev_opt);
  EXPECT_EQ(st.step, 1);
  EXPECT_EQ(dev_model.device(), Device("cuda:0"));
  expect_equal_on_cpu(dev_model.state_dict(), cpu_model.state_dict());
  for (const auto& [name, t] : dev_opt.state_dict()) {
    if (t.numel() > 1) EXPECT_EQ(t.device(), Device("cuda:0")) << name;
  }
  expect_equal_on_cpu(dev_opt.state_dict(), cpu_opt.state_dict());

  // Written from the device, read on the CPU.
  std::string again = save_checkpoint((dir.path / "from_device").string(), dev_model, &dev_opt,
                                      {.step = 2});
  Generator k(3);
  nn::ToyModel back(k);
  optim::SGD back_opt(back.parameters(), {.lr = 0.05, .momentum = 0.9});
  load_checkpoint(again, back, &back_opt);
  EXPECT_EQ(back.device(), kCPU);
  expect_equal_on_cpu(back.state_dict(), cpu_model.state_dict());
  expect_equal_on_cpu(back_opt.state_dict(), cpu_opt.state_dict());
}

}  // namespace
}  // namespace cohort::checkpoint
