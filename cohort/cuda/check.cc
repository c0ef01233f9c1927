#include "cohort/cuda/check.h"

#include "cohort/base/error.h"

namespace cohort::cuda {

std::string cuda_error_text(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

void throw_cuda_error(cudaError_t err, std::string_view call) {
  int device = -1;
  cudaGetDevice(&device);
  throw Error(fmt::format("cuda:{}: {} failed: {}", device, call, cuda_error_text(err)));
}

void throw_cublas_error(cublasStatus_t status, std::string_view call) {
  int device = -1;
  cudaGetDevice(&device);
  // Named here: cuBLAS's own strings need the library, which is opened on
  // first use (cublaslt_loader.cc).
  const char* name = "unknown status";
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      name = "CUBLAS_STATUS_NOT_INITIALIZED";
      break;
    case CUBLAS_STATUS_ALLOC_FAILED:
      name = "CUBLAS_STATUS_ALLOC_FAILED";
      break;
    case CUBLAS_STATUS_INVALID_VALUE:
      name = "CUBLAS_STATUS_INVALID_VALUE";
      break;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      name = "CUBLAS_STATUS_ARCH_MISMATCH";
      break;
    case CUBLAS_STATUS_MAPPING_ERROR:
      name = "CUBLAS_STATUS_MAPPING_ERROR";
      break;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      name = "CUBLAS_STATUS_EXECUTION_FAILED";
      break;
    case CUBLAS_STATUS_INTERNAL_ERROR:
      name = "CUBLAS_STATUS_INTERNAL_ERROR";
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      name = "CUBLAS_STATUS_NOT_SUPPORTED";
      break;
    case CUBLAS_STATUS_LICENSE_ERROR:
      name = "CUBLAS_STATUS_LICENSE_ERROR";
      break;
    default:
      break;
  }
  throw Error(
      fmt::format("cuda:{}: {} failed: {} ({})", device, call, name, static_cast<int>(status)));
}

void throw_cudnn_error(cudnnStatus_t status, std::string_view call) {
  int device = -1;
  cudaGetDevice(&device);
  throw Error(fmt::format("cuda:{}: {} failed: {}", device, call, cudnnGetErrorString(status)));
}

}  // namespace cohort::cuda
