// Cross-entropy forward, reduction and backward (dense_kernels.h): one block
// per row, each thread an online (maximum, sum of exp) over its columns,
// merged across the block; no [n, c] probability tensor.
#include <cuda_bf16.h>

#include <cmath>

#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

// A running softmax denominator: sum of exp(x - m) over the values seen.
struct MaxSum {
  float m, s;
};

__device__ inline MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  // Where both are empty (-inf) nothing is added; NaN sums stay NaN.
  if (m == -INFINITY) return {m, a.s + b.s};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ inline MaxSum add(MaxSum a, float x) {
  if (isnan(x)) return {a.m, NAN};
  if (x == -INFINITY) return a;
  if (x > a.m) return {x, a.s * expf(a.m - x) + 1.0f};
  return {a.m, a.s + expf(x - a.m)};
}

// The row's (max, sum) merged over the block: every thread gets it.
__device__ MaxSum block_merge(MaxSum v) {
  __shared__ MaxSum warps[32];
  __shared__ MaxSum total;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = merge(v, other);
  }
  if (lane == 0) warps[wid] = v;
  __syncthreads();
  if (wid == 0) {
    MaxSum t = lane < (blockDim.x + 31) / 32 ? warps[lane] : MaxSum{-INFINITY, 0.0f};
    for (int o = 16; o > 0; o /= 2) {
      MaxSum other{__shfl_xor_sync(0xffffffffu, t.m, o), __shfl_xor_sync(0xffffffffu, t.s, o)};
      t = merge(t, other);
    }
    if (lane == 0) total = t;
  }
  __syncthreads();
  return total;
}

template <class T, class I>
__global__ void ce_forward_kernel(const T* logits, const I* target, float* lse, float* per_row,
                                  int64_t c, int64_t ignore_index) {
  const int64_t row = blockIdx.x;
  const int64_t t = static_cast<int64_t>(target[row]);
  if (t == ignore_index) {  // the same branch for the whole block
    if (threadIdx.x == 0) {
      lse[row] = 0.0f;
      per_row[row] = 0.0f;
    }
    return;
  }
  const T* x = logits + row * c;
  MaxSum v{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) v = add(v, load(x, j));
  v = block_merge(v);
  if (threadIdx.x == 0) {
    // All -inf: the CPU's log_sum_exp gives the maximum, -inf.
    const float l = isinf(v.m) ? v.m : v.m + logf(v.s);
    lse[row] = l;
    per_row[row] = (t >= 0 && t < c) ? l - load(x, t) : NAN;
  }
}

template <class I>
__global__ void ce_reduce_kernel(const float* per_row, const I* target, float* loss, int64_t n,
                                 int64_t ignore_index, bool mean) {
  __shared__ double sums[1024];
  __shared__ int64_t counts[1024];
  double s = 0;
  int64_t k = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (static_cast<int64_t>(target[i]) != ignore_index) {
      s += per_row[i];
      ++k;
    }
  sums[threadIdx.x] = s;
  counts[threadIdx.x] = k;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (!mean)
      loss[0] = static_cast<float>(sums[0]);
    else
      loss[0] = counts[0] ? static_cast<float>(sums[0] / static_cast<double>(counts[0])) : NAN;
  }
}

template <class I>
__global__ void ce_count_kernel(const I* target, float* count, int64_t n, int64_t ignore_index) {
  __shared__ int64_t counts[1024];
  int64_t k = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    k += static_cast<int64_t>(target[i]) != ignore_index;
  counts[threadIdx.x] = k;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) count[0] = static_cast<float>(counts[0]);
}

template <class T, class I>
__global__ void ce_backward_kernel(const T* logits, const I* target, const float* lse,
                                   const float* grad, bool grad_per_row, const float* count, T* dx,
                                   int64_t c, int64_t ignore_index) {
  const int64_t row = blockIdx.x;
  const int64_t t = static_cast<int64_t>(target[row]);
  T* d = dx + row * c;
  if (t == ignore_index) {
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) store(d, j, 0.0f);
    return;
  }
  float g = grad_per_row ? grad[row] : grad[0];
  if (count != nullptr) g /= count[0];
  const bool valid = t >= 0 && t < c;
  const float l = lse[row];
  const T* x = logits + row * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float v = expf(load(x, j) - l) * g;
    if (j == t) v -= g;
    store(d, j, valid ? v : NAN);
  }
}

// Calls f(T{}, I{}) with the logits' and targets' element types.
template <class F>
void with_types(DType logits, DType target, F f) {
  auto with_target = [&](auto tag) {
    if (target == DType::kInt32)
      f(tag, int32_t{});
    else if (target == DType::kUInt8)
      f(tag, uint8_t{});
    else
      f(tag, int64_t{});
  };
  if (logits == DType::kBFloat16)
    with_target(__nv_bfloat16{});
  else
    with_target(float{});
}

}  // namespace

void launch_cross_entropy_forward(DType logits_dtype, const void* logits, DType target_dtype,
                                  const void* target, float* lse, float* per_row, int64_t n,
                                  int64_t c, int64_t ignore_index, cudaStream_t stream) {
  if (n == 0) return;
  with_types(logits_dtype, target_dtype, [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    ce_forward_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), static_cast<const I*>(target), lse, per_row, c,
        ignore_index);
  });
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_cross_entropy_reduce(const float* per_row, DType target_dtype, const void* target,
                                 float* loss, int64_t n, int64_t ignore_index, bool mean,
                                 cudaStream_t stream) {
  with_types(DType::kFloat32, target_dtype, [&](auto, auto i) {
    using I = decltype(i);
    ce_reduce_kernel<<<1, 1024, 0, stream>>>(per_row, static_cast<const I*>(target), loss, n,
                                             ignore_index, mean);
  });
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_cross_entropy_backward(DType logits_dtype, const void* logits, DType target_dtype,
                                   const void* target, const float* lse, const float* grad,
                                   bool grad_per_row, bool mean, float* count_scratch, void* dx,
                                   int64_t n, int64_t c, int64_t ignore_index,
                                   cudaStream_t stream) {
  if (n == 0) return;
  with_types(logits_dtype, target_dtype, [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    if (mean) {
      ce_count_kernel<<<1, 1024, 0, stream>>>(static_cast<const I*>(target), count_scratch, n,
                                              ignore_index);
      COHORT_CUDA_LAUNCH_CHECK();
    }
    ce_backward_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), static_cast<const I*>(target), lse, grad, grad_per_row,
        mean ? count_scratch : nullptr, static_cast<T*>(dx), c, ignore_index);
  });
  COHORT_CUDA_LAUNCH_CHECK();
}

}  // namespace cohort::cuda
