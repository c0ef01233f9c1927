// register_dense_kernels() fills every device-table entry of the dense area
// (install() runs when the layer loads): checked without a GPU, so that a
// missing registration shows on every machine, not only on one with a device.
#include <gtest/gtest.h>

#include "cohort/core/kernels/attention_device.h"
#include "cohort/core/kernels/bf16_rows.h"
#include "cohort/core/kernels/conv2d_device.h"
#include "cohort/core/kernels/cross_entropy.h"
#include "cohort/core/kernels/gelu.h"
#include "cohort/core/kernels/pool2d_device.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/norm.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

template <class Op>
void expect_cuda(const Op& op) {
  EXPECT_TRUE(op.has(DeviceType::kCUDA)) << op.name() << " has no CUDA kernel registered";
}

TEST(CudaDenseRegistration, EveryEntryHasItsKernel) {
  install();  // idempotent; done at load already
  expect_cuda(native::mm_device);
  expect_cuda(native::matmul_device);
  expect_cuda(native::linear_device);
  expect_cuda(native::mm_bf16_device);
  expect_cuda(native::matmul_bf16_device);
  expect_cuda(native::linear_bf16_device);
  expect_cuda(kernels::gelu_tanh_device);
  expect_cuda(kernels::gelu_tanh_backward_device);
  expect_cuda(kernels::linear_gelu_device);
  expect_cuda(kernels::linear_gelu_backward_device);
  expect_cuda(kernels::to_bf16_with_column_sums_device);
  expect_cuda(kernels::linear_gelu_tanh_bf16_device);
  expect_cuda(kernels::gelu_tanh_backward_bf16_device);
  expect_cuda(kernels::gelu_tanh_backward_through_linear_bf16_device);
  expect_cuda(kernels::conv2d_forward_device);
  expect_cuda(kernels::conv2d_backward_device);
  expect_cuda(kernels::max_pool2d_forward_device);
  expect_cuda(kernels::max_pool2d_backward_device);
  expect_cuda(native::layer_norm_device);
  expect_cuda(native::layer_norm_backward_device);
  expect_cuda(native::add_layer_norm_device);
  expect_cuda(kernels::cross_entropy_device);
  expect_cuda(kernels::cross_entropy_backward_device);
  expect_cuda(kernels::attention_forward_device);
  expect_cuda(kernels::attention_backward_device);
}

TEST(CudaDenseRegistration, Tf32IsOffUnlessAllowed) {
  // As torch.backends.cuda.matmul.allow_tf32: float32 products are float32
  // products until the caller allows TF32.
  EXPECT_FALSE(native::allow_tf32());
  native::set_allow_tf32(true);
  EXPECT_TRUE(native::allow_tf32());
  native::set_allow_tf32(false);
  EXPECT_FALSE(native::allow_tf32());
}

}  // namespace
}  // namespace cohort::cuda
