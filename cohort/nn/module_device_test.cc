// Module::to(device) moves parameters, gradients and buffers in place (the
// fake device stands in for a GPU).
#include <gtest/gtest.h>

#include "cohort/core/fake_device_testing.h"
#include "cohort/core/random.h"
#include "cohort/nn/batch_norm.h"
#include "cohort/nn/linear.h"

namespace cohort::nn {
namespace {

TEST(ModuleDevice, ToMovesEveryHandleInPlaceAndBack) {
  testing::FakeCudaDevice fake;
  Generator g(7);
  Linear lin(3, 2, g);
  std::vector<Tensor> handles = lin.parameters();  // taken before the move, like an optimizer's
  std::vector<std::vector<float>> before;
  for (const Tensor& p : handles) before.push_back(p.to_vector<float>());
  handles[0].set_grad(Tensor::ones(handles[0].sizes()));

  EXPECT_EQ(lin.device(), kCPU);
  lin.to(Device("cuda"));
  EXPECT_EQ(lin.device(), Device("cuda:0"));
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(handles[i].device(), Device("cuda:0"));
    EXPECT_TRUE(handles[i].requires_grad());
    EXPECT_EQ(handles[i].to_vector<float>(), before[i]);
  }
  EXPECT_EQ(handles[0].grad().device(), Device("cuda:0"));
  EXPECT_EQ(handles[0].grad().to_vector<float>(), std::vector<float>(6, 1.0f));

  lin.cpu();
  EXPECT_EQ(handles[1].device(), kCPU);
  EXPECT_EQ(handles[1].to_vector<float>(), before[1]);
}

TEST(ModuleDevice, BuffersMoveToo) {
  testing::FakeCudaDevice fake;
  BatchNorm2d bn(4);
  bn.to(Device("cuda:0"));
  for (const Tensor& b : bn.buffers()) EXPECT_EQ(b.device(), Device("cuda:0"));
  EXPECT_EQ(bn.buffers().front().cpu().to_vector<float>(), std::vector<float>(4, 0.0f));
}

}  // namespace
}  // namespace cohort::nn
