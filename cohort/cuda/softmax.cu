// Softmax family and NLL loss kernels (native/softmax.h, native/loss.h on a
// CUDA device). A row is handled by a warp when it is short (up to 1024
// elements: the classifier heads) and by a whole block otherwise; its max,
// its sum of exponentials (in double, as the CPU's) and the outputs take
// three passes over the row, which stays in L2 between them. The NLL loss
// runs in one block: N is the batch, small beside the N x C scores.
#include <cmath>
#include <cstdio>

#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

constexpr int kWarps = kThreads / 32;

struct Max {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a > b ? a : b;
  }
};

template <int G, bool kLog, typename T>
__global__ void softmax_rows(const T* x, T* y, int64_t rows, int64_t n) {
  using M = MathOf<T>;
  constexpr int R = kThreads / G;  // rows per block
  __shared__ M smem_m[kWarps];
  __shared__ double smem_d[kWarps];
  const int lane = threadIdx.x % G;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * R; first < rows;
       first += static_cast<int64_t>(gridDim.x) * R) {
    const int64_t row = first + threadIdx.x / G;
    // Uniform over the group (a warp or the block), so its shuffles and
    // barriers see every thread.
    if (row >= rows) continue;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    M mx = -INFINITY;
    for (int64_t i = lane; i < n; i += G) {
      const M v = convert<M>(xr[i]);
      mx = v > mx ? v : mx;
    }
    mx = group_all<G>(mx, Max{}, smem_m);
    double s = 0;
    for (int64_t i = lane; i < n; i += G) s += static_cast<double>(d_exp(convert<M>(xr[i]) - mx));
    s = group_all<G>(s, Plus{}, smem_d);
    if constexpr (kLog) {
      const M lse = mx + static_cast<M>(log(s));
      for (int64_t i = lane; i < n; i += G) yr[i] = convert<T>(convert<M>(xr[i]) - lse);
    } else {
      const M inv = static_cast<M>(1.0 / s);
      for (int64_t i = lane; i < n; i += G) yr[i] = convert<T>(d_exp(convert<M>(xr[i]) - mx) * inv);
    }
  }
}

template <int G, bool kLog, typename T>
__global__ void softmax_backward_rows(const T* g, const T* y, T* dx, int64_t rows, int64_t n) {
  using M = MathOf<T>;
  constexpr int R = kThreads / G;
  __shared__ double smem_d[kWarps];
  const int lane = threadIdx.x % G;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * R; first < rows;
       first += static_cast<int64_t>(gridDim.x) * R) {
    const int64_t row = first + threadIdx.x / G;
    if (row >= rows) continue;
    const T* gr = g + row * n;
    const T* yr = y + row * n;
    T* dr = dx + row * n;
    double s = 0;
    for (int64_t i = lane; i < n; i += G) {
      const double gi = static_cast<double>(convert<M>(gr[i]));
      s += kLog ? gi : gi * static_cast<double>(convert<M>(yr[i]));
    }
    const M st = static_cast<M>(group_all<G>(s, Plus{}, smem_d));
    for (int64_t i = lane; i < n; i += G) {
      const M gi = convert<M>(gr[i]), yi = convert<M>(yr[i]);
      dr[i] = convert<T>(kLog ? gi - d_exp(yi) * st : yi * (gi - st));
    }
  }
}

template <bool kLog, typename T>
void launch_rows(const T* x, T* y, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n <= 1024) {
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    softmax_rows<32, kLog, T><<<grid_for(blocks * kThreads), kThreads, 0, stream>>>(x, y, rows, n);
  } else {
    softmax_rows<kThreads, kLog, T>
        <<<grid_for(rows * kThreads), kThreads, 0, stream>>>(x, y, rows, n);
  }
  COHORT_CUDA_LAUNCH_CHECK();
}

template <bool kLog, typename T>
void launch_backward_rows(const T* g, const T* y, T* dx, int64_t rows, int64_t n,
                          cudaStream_t stream) {
  if (n <= 1024) {
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    softmax_backward_rows<32, kLog, T>
        <<<grid_for(blocks * kThreads), kThreads, 0, stream>>>(g, y, dx, rows, n);
  } else {
    softmax_backward_rows<kThreads, kLog, T>
        <<<grid_for(rows * kThreads), kThreads, 0, stream>>>(g, y, dx, rows, n);
  }
  COHORT_CUDA_LAUNCH_CHECK();
}

__device__ void bad_target(int64_t row, int64_t t, int64_t c) {
  printf("cohort: nll_loss: target %lld out of range [0, %lld) at row %lld\n",
         static_cast<long long>(t), static_cast<long long>(c), static_cast<long long>(row));
  __trap();
}

template <typename T>
__global__ void nll_forward(const T* x, const int64_t* target, int64_t n, int64_t c, int64_t ignore,
                            int reduction, T* per, T* out) {
  using M = MathOf<T>;
  __shared__ double smem_d[kWarps];
  __shared__ long long smem_i[kWarps];
  double total = 0;
  long long count = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t t = target[i];
    if (t == ignore) {
      if (per != nullptr) per[i] = convert<T>(M(0));
      continue;
    }
    if (t < 0 || t >= c) bad_target(i, t, c);
    // -x in T first, as the CPU's p[i], then accumulated in double.
    const T v = convert<T>(-convert<M>(x[i * c + t]));
    if (per != nullptr) per[i] = v;
    total += static_cast<double>(convert<M>(v));
    ++count;
  }
  if (reduction == 0) return;
  total = group_all<kThreads>(total, Plus{}, smem_d);
  count = group_all<kThreads>(count, Plus{}, smem_i);
  if (threadIdx.x == 0) {
    const double r = reduction == 2 ? total : (count ? total / static_cast<double>(count) : NAN);
    out[0] = convert<T>(r);
  }
}

template <typename T>
__global__ void nll_backward(const T* grad, const int64_t* target, int64_t n, int64_t c,
                             int64_t ignore, int reduction, T* dx) {
  using M = MathOf<T>;
  __shared__ long long smem_i[kWarps];
  long long count = 0;
  if (reduction == 1) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) count += target[i] != ignore;
    count = group_all<kThreads>(count, Plus{}, smem_i);
  }
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t t = target[i];
    if (t == ignore) continue;
    if (t < 0 || t >= c) bad_target(i, t, c);
    M g;
    if (reduction == 0)
      g = convert<M>(grad[i]);
    else if (reduction == 2)
      g = convert<M>(grad[0]);
    else
      g = convert<M>(grad[0]) / static_cast<M>(count);
    dx[i * c + t] = convert<T>(-g);
  }
}

}  // namespace

void launch_softmax(bool log, DType dtype, const void* x, void* y, int64_t rows, int64_t n,
                    cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  dispatch_float_types(dtype, log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (log)
      launch_rows<true>(static_cast<const T*>(x), static_cast<T*>(y), rows, n, stream);
    else
      launch_rows<false>(static_cast<const T*>(x), static_cast<T*>(y), rows, n, stream);
  });
}

void launch_softmax_backward(bool log, DType dtype, const void* g, const void* y, void* dx,
                             int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  dispatch_float_types(dtype, log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = static_cast<const T*>(g);
    const T* py = static_cast<const T*>(y);
    T* pd = static_cast<T*>(dx);
    if (log)
      launch_backward_rows<true>(pg, py, pd, rows, n, stream);
    else
      launch_backward_rows<false>(pg, py, pd, rows, n, stream);
  });
}

void launch_nll_loss(DType dtype, const void* x, const int64_t* target, int64_t n, int64_t c,
                     int64_t ignore_index, int reduction, void* per, void* out,
                     cudaStream_t stream) {
  dispatch_float_types(dtype, "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nll_forward<T><<<1, kThreads, 0, stream>>>(static_cast<const T*>(x), target, n, c, ignore_index,
                                               reduction, static_cast<T*>(per),
                                               static_cast<T*>(out));
    COHORT_CUDA_LAUNCH_CHECK();
  });
}

void launch_nll_loss_backward(DType dtype, const void* grad, const int64_t* target, int64_t n,
                              int64_t c, int64_t ignore_index, int reduction, void* dx,
                              cudaStream_t stream) {
  dispatch_float_types(dtype, "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nll_backward<T><<<1, kThreads, 0, stream>>>(static_cast<const T*>(grad), target, n, c,
                                                ignore_index, reduction, static_cast<T*>(dx));
    COHORT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace cohort::cuda
