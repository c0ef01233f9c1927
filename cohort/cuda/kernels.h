// Registration of the CUDA kernels with core's device tables
// (cohort/core/device_dispatch.h), one function per area; install() calls
// them all once.
#pragma once

namespace cohort::cuda {

void register_tensor_kernels();     // copy_, fill_ (tensor_copy.cu)
void register_pointwise_kernels();  // elementwise, reductions, softmax, index, optimizer updates
void register_dense_kernels();      // GEMM, conv2d, pooling, layer norm, attention, cross-entropy

}  // namespace cohort::cuda
