// Kernels behind Tensor::copy_ and fill_ on a CUDA device: strided,
// broadcasting, dtype-converting copy, and fill; and the stochastic rounding
// to bfloat16 of native/bf16_rounding.h.
#include <cmath>

#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

template <typename D, typename S>
struct CopyOp {
  D* dst;
  const S* src;
  __device__ void operator()(const int64_t (&off)[2]) const {
    dst[off[0]] = convert<D>(src[off[1]]);
  }
};

template <typename T>
struct FillOp {
  T* dst;
  T value;
  __device__ void operator()(const int64_t (&off)[1]) const { dst[off[0]] = value; }
};

// The CPU's cast_value<T>(double) on the host (the value is converted once).
template <typename T>
T host_cast(double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// bf16_rounding.cc's splitmix64 finaliser.
__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void stochastic_bf16_kernel(const float* x, uint16_t* y, int64_t n, uint64_t key,
                                       uint64_t offset) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint32_t u = __float_as_uint(x[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      y[i] = 0x7fc0;
      continue;
    }
    const uint32_t r = static_cast<uint32_t>(mix(key ^ (offset + static_cast<uint64_t>(i)))) >> 16;
    const bool inf = (u & 0x7fffffffu) == 0x7f800000u;
    y[i] = static_cast<uint16_t>((inf ? u : u + r) >> 16);
  }
}

uint64_t host_mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void launch_to_bf16_stochastic(const float* x, uint16_t* y, int64_t n, uint64_t seed,
                               uint64_t offset, cudaStream_t stream) {
  if (n == 0) return;
  stochastic_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, host_mix(seed), offset);
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                 const StridedPlan<2>& plan, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (dst_dtype == src_dtype && plan_is_dense(plan)) {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype),
                                      cudaMemcpyDeviceToDevice, stream));
    return;
  }
  dispatch_all_types(dst_dtype, "copy_", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_all_types(src_dtype, "copy_", [&](auto stag) {
      using S = typename decltype(stag)::type;
      launch_strided<2>(plan, n, stream,
                        CopyOp<D, S>{static_cast<D*>(dst), static_cast<const S*>(src)});
    });
  });
}

void launch_fill(void* dst, DType dtype, double value, const StridedPlan<1>& plan, int64_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  if (value == 0.0 && !std::signbit(value) && plan_is_dense(plan)) {
    // Zero is all-zero bytes in every dtype.
    COHORT_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * dtype_size(dtype), stream));
    return;
  }
  dispatch_all_types(dtype, "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<1>(plan, n, stream, FillOp<T>{static_cast<T*>(dst), host_cast<T>(value)});
  });
}

}  // namespace cohort::cuda
