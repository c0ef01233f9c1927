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
  throw Error(fmt::format("cuda:{}: {} failed: {} ({})", device, call,
                          cublasLtGetStatusString(status), cublasLtGetStatusName(status)));
}

void throw_cudnn_error(cudnnStatus_t status, std::string_view call) {
  int device = -1;
  cudaGetDevice(&device);
  throw Error(fmt::format("cuda:{}: {} failed: {}", device, call, cudnnGetErrorString(status)));
}

}  // namespace cohort::cuda
