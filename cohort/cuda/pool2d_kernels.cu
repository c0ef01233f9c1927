// Max pooling forward and backward (dense_kernels.h): one thread per output
// (forward) or per input element (backward, a gather over the windows that
// can hold it, so no two threads write one element).
#include <cmath>

#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 32));
}

__global__ void max_pool_forward_kernel(PoolShape s, const float* x, float* y, int32_t* argmax) {
  const int64_t n = s.planes * s.out_h * s.out_w;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n;
       o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = o % s.out_w, oh = (o / s.out_w) % s.out_h, p = o / (s.out_w * s.out_h);
    const float* xp = x + p * s.in_h * s.in_w;
    const int64_t h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
    // As the CPU: start at the first in-bounds element with -inf, take any
    // larger value or any NaN (so ties keep the first, and the last NaN wins).
    float best = -INFINITY;
    int64_t best_i = max(h0, int64_t{0}) * s.in_w + max(w0, int64_t{0});
    for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
      const int64_t ih = h0 + kh;
      if (ih < 0 || ih >= s.in_h) continue;
      for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
        const int64_t iw = w0 + kw;
        if (iw < 0 || iw >= s.in_w) continue;
        const float v = xp[ih * s.in_w + iw];
        if (v > best || isnan(v)) {
          best = v;
          best_i = ih * s.in_w + iw;
        }
      }
    }
    y[o] = best;
    argmax[o] = static_cast<int32_t>(best_i);
  }
}

__global__ void max_pool_backward_kernel(PoolShape s, const float* dy, const int32_t* argmax,
                                         float* dx) {
  const int64_t n = s.planes * s.in_h * s.in_w;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = i % s.in_w, ih = (i / s.in_w) % s.in_h, p = i / (s.in_w * s.in_h);
    const int32_t self = static_cast<int32_t>(ih * s.in_w + iw);
    // Windows oh with oh * stride - pad <= ih <= oh * stride - pad + kernel - 1.
    const int64_t oh0 = max(int64_t{0}, (ih + s.pad_h - s.kernel_h + s.stride_h) / s.stride_h);
    const int64_t oh1 = min(s.out_h - 1, (ih + s.pad_h) / s.stride_h);
    const int64_t ow0 = max(int64_t{0}, (iw + s.pad_w - s.kernel_w + s.stride_w) / s.stride_w);
    const int64_t ow1 = min(s.out_w - 1, (iw + s.pad_w) / s.stride_w);
    const int64_t base = p * s.out_h * s.out_w;
    float sum = 0.0f;
    // Ascending output order: the CPU's scatter adds in this order too.
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = base + oh * s.out_w + ow;
        if (argmax[o] == self) sum += dy[o];
      }
    dx[i] = sum;
  }
}

}  // namespace

void launch_max_pool2d_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax,
                               cudaStream_t stream) {
  const int64_t n = s.planes * s.out_h * s.out_w;
  if (n == 0) return;
  max_pool_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(s, x, y, argmax);
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_max_pool2d_backward(const PoolShape& s, const float* dy, const int32_t* argmax,
                                float* dx, cudaStream_t stream) {
  const int64_t n = s.planes * s.in_h * s.in_w;
  if (n == 0) return;
  max_pool_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(s, dy, argmax, dx);
  COHORT_CUDA_LAUNCH_CHECK();
}

}  // namespace cohort::cuda
