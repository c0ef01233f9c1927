// LayerNorm forward (with the residual add) and backward (dense_kernels.h):
// one block per row for the row statistics, and column blocks over chunks of
// rows for the weight and bias gradients. Sums are float32, in a fixed
// order (the same bits every run).
#include <cuda_bf16.h>

#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColTile = 32, kColRows = 8;
constexpr int64_t kRowsPerChunk = 128, kMaxChunks = 1024;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
// Stores v rounded to the element type and returns the stored value.
__device__ inline float store(float* p, int64_t i, float v) {
  p[i] = v;
  return v;
}
__device__ inline float store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
  return __bfloat162float(p[i]);
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over the block (every thread gets it).
__device__ float block_sum(float v) {
  __shared__ float warps[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) warps[wid] = v;
  __syncthreads();
  if (wid == 0) {
    float t = lane < (blockDim.x + 31) / 32 ? warps[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // warps[] and total are reused by the next call
  return r;
}

template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* delta, T* sum, const float* w,
                                          const float* b, T* out, __nv_bfloat16* out16, float* mean,
                                          float* rstd, int64_t n, float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * n;
  // The row's values: x, or x + delta as stored in sum.
  const T* vr = xr;
  float s = 0.0f;
  if (delta != nullptr) {
    const T* dr = delta + row * n;
    T* sr = sum + row * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      s += store(sr, i, load(xr, i) + load(dr, i));
    vr = sr;
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += load(xr, i);
  }
  const float m = block_sum(s) / static_cast<float>(n);
  // Two passes (the mean first): no cancellation in the variance.
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float c = load(vr, i) - m;
    v += c * c;
  }
  const float rs = 1.0f / sqrtf(block_sum(v) / static_cast<float>(n) + eps);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
  T* orow = out + row * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float y = (load(vr, i) - m) * rs;
    if (w != nullptr) y *= w[i];
    if (b != nullptr) y += b[i];
    store(orow, i, y);
    if (out16 != nullptr) out16[row * n + i] = __float2bfloat16(y);
  }
}

template <class T>
__global__ void layer_norm_dx_kernel(const T* g, const T* x, const float* w, const float* mean,
                                     const float* rstd, T* dx, int64_t n) {
  const int64_t row = blockIdx.x;
  const T* gr = g + row * n;
  const T* xr = x + row * n;
  const float m = mean[row], rs = rstd[row];
  float a = 0.0f, c = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float dy = w != nullptr ? load(gr, i) * w[i] : load(gr, i);
    a += dy;
    c += dy * (load(xr, i) - m) * rs;
  }
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mean_dy = block_sum(a) * inv_n, mean_dy_xhat = block_sum(c) * inv_n;
  T* dr = dx + row * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float dy = w != nullptr ? load(gr, i) * w[i] : load(gr, i);
    const float xhat = (load(xr, i) - m) * rs;
    store(dr, i, rs * (dy - mean_dy - xhat * mean_dy_xhat));
  }
}

// Block (column tile, chunk of rows): partial sums of g * xhat and g.
template <class T>
__global__ void layer_norm_param_grads_kernel(const T* g, const T* x, const float* mean,
                                              const float* rstd, float* dw_part, float* db_part,
                                              int64_t rows, int64_t n, int64_t chunk_rows) {
  __shared__ float pw[kColRows][kColTile], pb[kColRows][kColTile];
  const int64_t c = blockIdx.x * int64_t{kColTile} + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  float sw = 0.0f, sb = 0.0f;
  if (c < n)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) {
      const float gv = load(g, r * n + c);
      sw += gv * (load(x, r * n + c) - mean[r]) * rstd[r];
      sb += gv;
    }
  pw[threadIdx.y][threadIdx.x] = sw;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float tw = 0.0f, tb = 0.0f;
    for (int i = 0; i < kColRows; ++i) {
      tw += pw[i][threadIdx.x];
      tb += pb[i][threadIdx.x];
    }
    dw_part[blockIdx.y * n + c] = tw;
    db_part[blockIdx.y * n + c] = tb;
  }
}

}  // namespace

void launch_layer_norm_forward(DType dtype, const void* x, const void* delta, void* sum,
                               const float* weight, const float* bias, void* out, void* out16,
                               float* mean, float* rstd, int64_t rows, int64_t n, float eps,
                               cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  auto* o16 = static_cast<__nv_bfloat16*>(out16);
  if (dtype == DType::kBFloat16) {
    using T = __nv_bfloat16;
    layer_norm_forward_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(delta), static_cast<T*>(sum), weight, bias,
        static_cast<T*>(out), o16, mean, rstd, n, eps);
  } else {
    layer_norm_forward_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<const float*>(delta), static_cast<float*>(sum),
        weight, bias, static_cast<float*>(out), o16, mean, rstd, n, eps);
  }
  COHORT_CUDA_LAUNCH_CHECK();
}

int64_t layer_norm_partial_chunks(int64_t rows) {
  return std::max<int64_t>(1, std::min(kMaxChunks, (rows + kRowsPerChunk - 1) / kRowsPerChunk));
}

void launch_layer_norm_backward(DType dtype, const void* grad, const void* x, const float* weight,
                                const float* mean, const float* rstd, void* dx, float* dweight_part,
                                float* dbias_part, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t chunks = layer_norm_partial_chunks(rows);
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  const dim3 col_grid(static_cast<unsigned>((n + kColTile - 1) / kColTile),
                      static_cast<unsigned>(chunks));
  const dim3 col_block(kColTile, kColRows);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (dx != nullptr && rows > 0) {
      layer_norm_dx_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(x), weight, mean, rstd,
          static_cast<T*>(dx), n);
      COHORT_CUDA_LAUNCH_CHECK();
    }
    if (dweight_part != nullptr) {
      layer_norm_param_grads_kernel<<<col_grid, col_block, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(x), mean, rstd, dweight_part,
          dbias_part, rows, n, chunk_rows);
      COHORT_CUDA_LAUNCH_CHECK();
    }
  };
  if (dtype == DType::kBFloat16)
    run(__nv_bfloat16{});
  else
    run(float{});
}

}  // namespace cohort::cuda
