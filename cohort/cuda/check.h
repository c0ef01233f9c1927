// Error checks for CUDA, cuBLASLt and cuDNN calls: a failed call throws
// cohort::Error naming the call, the library's message and code, and the
// device, so that no failure passes silently.
// Thread safety: stateless.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string_view>

namespace cohort::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, std::string_view call);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, std::string_view call);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, std::string_view call);

// The message of a failed cudaGetDeviceCount (no device, driver too old...).
std::string cuda_error_text(cudaError_t err);

}  // namespace cohort::cuda

#define COHORT_CUDA_CHECK(call)                                  \
  do {                                                           \
    cudaError_t cohort_cuda_err_ = (call);                       \
    if (cohort_cuda_err_ != cudaSuccess) [[unlikely]]            \
      ::cohort::cuda::throw_cuda_error(cohort_cuda_err_, #call); \
  } while (0)

#define COHORT_CUBLAS_CHECK(call)                                   \
  do {                                                              \
    cublasStatus_t cohort_cublas_st_ = (call);                      \
    if (cohort_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]    \
      ::cohort::cuda::throw_cublas_error(cohort_cublas_st_, #call); \
  } while (0)

#define COHORT_CUDNN_CHECK(call)                                  \
  do {                                                            \
    cudnnStatus_t cohort_cudnn_st_ = (call);                      \
    if (cohort_cudnn_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]    \
      ::cohort::cuda::throw_cudnn_error(cohort_cudnn_st_, #call); \
  } while (0)

// After a kernel launch: a bad launch configuration is reported at once.
#define COHORT_CUDA_LAUNCH_CHECK() COHORT_CUDA_CHECK(cudaGetLastError())
