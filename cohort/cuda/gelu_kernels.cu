// The elementwise kernels under linear / linear_gelu (dense_kernels.h): bias
// rows, GELU (tanh form) and its derivative, column sums (bias gradients).
#include <cuda_bf16.h>

#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline double load(const double* p, int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(double* p, int64_t i, double v) { p[i] = v; }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

// The arithmetic type of an element type: float for bfloat16.
template <class T>
struct Acc {
  using type = T;
};
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

template <class T>
__global__ void add_bias_rows_kernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] += bias[i % cols];
}

// PyTorch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class A>
__device__ inline A gelu_tanh_value(A x) {
  const A k0 = A(0.7978845608028654), k1 = A(0.044715);
  return A(0.5) * x * (A(1) + tanh(k0 * (x + k1 * x * x * x)));
}

template <class A>
__device__ inline A gelu_tanh_grad(A x) {
  const A k0 = A(0.7978845608028654), k1 = A(0.044715);
  const A t = tanh(k0 * (x + k1 * x * x * x));
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k0 * (A(1) + A(3) * k1 * x * x);
}

template <class T>
__global__ void gelu_kernel(const T* x, T* y, int64_t n) {
  using A = typename Acc<T>::type;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store(y, i, gelu_tanh_value<A>(load(x, i)));
}

template <class T>
__global__ void gelu_backward_kernel(const T* g, const T* x, T* dx, int64_t n) {
  using A = typename Acc<T>::type;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store(dx, i, A(load(g, i)) * gelu_tanh_grad<A>(load(x, i)));
}

// One block per 32 columns; its 32 x 8 threads sum rows ty, ty + 8, ... of
// their column, then the 8 partials are added in a fixed order.
constexpr int kSumCols = 32, kSumRows = 8;

template <class T>
__global__ void column_sums_kernel(const T* x, T* out, int64_t rows, int64_t cols) {
  __shared__ T part[kSumRows][kSumCols];
  const int64_t c = blockIdx.x * int64_t{kSumCols} + threadIdx.x;
  T s = 0;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kSumRows) s += x[r * cols + c];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    T t = 0;
    for (int i = 0; i < kSumRows; ++i) t += part[i][threadIdx.x];
    out[c] = t;
  }
}

}  // namespace

void launch_add_bias_rows(DType dtype, void* y, const void* bias, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows * cols == 0) return;
  if (dtype == DType::kFloat64)
    add_bias_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(
        static_cast<double*>(y), static_cast<const double*>(bias), rows, cols);
  else
    add_bias_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(
        static_cast<float*>(y), static_cast<const float*>(bias), rows, cols);
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_gelu_tanh(DType dtype, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::kFloat64)
    gelu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const double*>(x),
                                                        static_cast<double*>(y), n);
  else if (dtype == DType::kBFloat16)
    gelu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                        static_cast<__nv_bfloat16*>(y), n);
  else
    gelu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                        static_cast<float*>(y), n);
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_gelu_tanh_backward(DType dtype, const void* grad, const void* x, void* dx, int64_t n,
                               cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::kFloat64)
    gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const double*>(grad),
                                                                 static_cast<const double*>(x),
                                                                 static_cast<double*>(dx), n);
  else if (dtype == DType::kBFloat16)
    gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(grad), static_cast<const __nv_bfloat16*>(x),
        static_cast<__nv_bfloat16*>(dx), n);
  else
    gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const float*>(grad), static_cast<const float*>(x), static_cast<float*>(dx), n);
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_column_sums(DType dtype, const void* x, void* out, int64_t rows, int64_t cols,
                        cudaStream_t stream) {
  if (cols == 0) return;
  const dim3 block(kSumCols, kSumRows);
  const unsigned grid = static_cast<unsigned>((cols + kSumCols - 1) / kSumCols);
  if (dtype == DType::kFloat64)
    column_sums_kernel<<<grid, block, 0, stream>>>(static_cast<const double*>(x),
                                                   static_cast<double*>(out), rows, cols);
  else
    column_sums_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(x),
                                                   static_cast<float*>(out), rows, cols);
  COHORT_CUDA_LAUNCH_CHECK();
}

}  // namespace cohort::cuda
