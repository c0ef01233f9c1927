// Every device entry of the pointwise area has its CUDA kernel once the layer
// is linked (install.cc registers them at load): runs without a GPU, so a
// forgotten registration fails here and not on the device.
#include <gtest/gtest.h>

#include "cohort/core/native/bf16_rounding.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/fused_optim.h"
#include "cohort/core/native/index.h"
#include "cohort/core/native/loss.h"
#include "cohort/core/native/reduce.h"
#include "cohort/core/native/softmax.h"
#include "cohort/core/tensor_device_ops.h"

namespace cohort::cuda {
namespace {

template <typename... Ops>
void expect_registered(const Ops&... ops) {
  for (auto [name, has] : {std::pair<const char*, bool>{ops.name(), ops.has(DeviceType::kCUDA)}...})
    EXPECT_TRUE(has) << name << " has no CUDA kernel";
}

TEST(CudaPointwiseRegistry, EveryEntryHasAKernel) {
  using namespace native;
  expect_registered(copy_device, fill_device, to_bf16_stochastic_device);
  expect_registered(binary_device, binary_scalar_device, rbinary_scalar_device, compare_device,
                    compare_scalar_device, unary_device, clamp_device, where_device, axpby_device,
                    relu_backward_device, gelu_backward_device, tanh_backward_device,
                    sigmoid_backward_device, clamp_backward_device);
  expect_registered(sum_device, mean_device, max_device, min_device);
  expect_registered(softmax_device, log_softmax_device, softmax_backward_device,
                    log_softmax_backward_device, nll_loss_device, nll_loss_backward_device);
  expect_registered(index_select_device, index_add_device, gather_device, scatter_add_device,
                    triangle_device, masked_fill_device, dropout_device);
  expect_registered(sgd_step_device, adam_step_device, total_norm_device, scale_by_norm_device);
}

}  // namespace
}  // namespace cohort::cuda
