// For the CUDA kernels of the pointwise area (.cu files only): cohort's
// dtypes as device element types, the conversions between them (the CPU's
// cast_value: bfloat16 and float16 through float, rounding to nearest even),
// dtype dispatch on the host side of a launch, the grid-stride loop over a
// StridedPlan, and the launch size.
// Thread safety: stateless.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cohort/core/dtype.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/strided.h"

namespace cohort::cuda {

template <typename T>
struct Tag {
  using type = T;
};

template <typename T>
inline constexpr bool kIsLowFloat = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// The type arithmetic on T runs in: float for the 16-bit floats.
template <typename T>
using MathOf = std::conditional_t<kIsLowFloat<T>, float, T>;

template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert<To>(__half2float(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// The device's libm by argument type (float: the single-precision
// functions, within 2 ulp; double: the double ones).
__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }
__device__ __forceinline__ float d_log(float x) { return logf(x); }
__device__ __forceinline__ double d_log(double x) { return log(x); }
__device__ __forceinline__ float d_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double d_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float d_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double d_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float d_erf(float x) { return erff(x); }
__device__ __forceinline__ double d_erf(double x) { return erf(x); }
__device__ __forceinline__ float d_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double d_pow(double x, double y) { return pow(x, y); }

// The cohort dtype of a device element type (only these have one).
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::kFloat64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kInt64;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::kUInt8;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return DType::kBFloat16;
  else if constexpr (std::is_same_v<T, __half>)
    return DType::kFloat16;
  else
    static_assert(sizeof(T) == 0, "no cohort dtype for this element type");
}

// Host side: calls f(Tag<T>{}) with the T of Ts whose dtype is `t`;
// NotSupported naming `op` for a dtype outside Ts (throw_dtype, strided.h).
// A kernel lists the element types it is instantiated for.
template <typename... Ts, typename F>
void dispatch_types(DType t, const char* op, F&& f) {
  const bool found = ((t == dtype_of<Ts>() ? (f(Tag<Ts>{}), true) : false) || ...);
  if (!found) throw_dtype(op, t);
}

// Every dtype.
template <typename F>
void dispatch_all_types(DType t, const char* op, F&& f) {
  dispatch_types<float, double, int32_t, int64_t, uint8_t, __nv_bfloat16, __half>(
      t, op, static_cast<F&&>(f));
}

// float32, float64, bfloat16 (arithmetic in float).
template <typename F>
void dispatch_float_types(DType t, const char* op, F&& f) {
  dispatch_types<float, double, __nv_bfloat16>(t, op, static_cast<F&&>(f));
}

// The float types and the integers (no float16: the CPU has no math on it).
template <typename F>
void dispatch_arith_types(DType t, const char* op, F&& f) {
  dispatch_types<float, double, __nv_bfloat16, int32_t, int64_t, uint8_t>(t, op,
                                                                          static_cast<F&&>(f));
}

inline constexpr int kThreads = 256;

// op over the G consecutive threads of a group (G a power of two up to
// kThreads; a group of more than a warp is the whole block), every thread
// getting the result. Warps combine by butterfly shuffles; a block's warp
// results are combined in warp order through `smem` (kThreads / 32 slots), so
// the result is the same on every run. Every thread of the group calls it.
template <int G, typename V, typename Op>
__device__ __forceinline__ V group_all(V v, Op op, V* smem) {
  static_assert(G <= kThreads && (G & (G - 1)) == 0);
  for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (G > 32) {
    __syncthreads();  // smem may still be read from the previous call
    if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < G / 32; ++w) v = op(v, smem[w]);
  }
  return v;
}

struct Plus {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};

// Blocks for n elements at one per thread, capped: the kernels loop with a
// grid stride past the cap.
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (1 << 20) ? (blocks > 0 ? blocks : 1) : (1 << 20));
}

// f(off) for every output index, off the K operand offsets.
template <int K, typename F>
__global__ void strided_kernel(StridedPlan<K> plan, int64_t n, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool small = n <= 0xffffffffLL;  // uniform: every size fits 32 bits
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[K];
    if (small)
      plan.offsets32(static_cast<uint32_t>(i), off);
    else
      plan.offsets(i, off);
    f(off);
  }
}

template <int K, typename F>
void launch_strided(const StridedPlan<K>& plan, int64_t n, cudaStream_t stream, F f) {
  if (n == 0) return;
  strided_kernel<K><<<grid_for(n), kThreads, 0, stream>>>(plan, n, f);
  COHORT_CUDA_LAUNCH_CHECK();
}

}  // namespace cohort::cuda
