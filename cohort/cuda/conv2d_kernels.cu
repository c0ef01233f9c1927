// The ReLU mask of conv2d_relu's backward (dense_kernels.h).
#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {
namespace {

__global__ void relu_mask_kernel(const float* dy, const float* y, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

void launch_relu_mask(const float* dy, const float* y, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 32);
  relu_mask_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(dy, y, out, n);
  COHORT_CUDA_LAUNCH_CHECK();
}

}  // namespace cohort::cuda
