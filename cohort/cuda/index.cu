// Index kernels (native/index.h on a CUDA device): row gathers and
// scatter-adds for embeddings, dropout from cohort's Philox stream, masked
// fills and triangles. Gathers and triangles move elements as bits of their
// size, so one kernel serves every dtype.
#include <cstdio>

#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

__device__ void bad_index(const char* op, int64_t v, int64_t n) {
  printf("cohort: %s: index %lld out of range [0, %lld)\n", op, static_cast<long long>(v),
         static_cast<long long>(n));
  __trap();
}

template <typename T>
__device__ __forceinline__ void atomic_add(T* dst, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement: the unsigned add is the signed one.
    atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(dst, v);
  }
}

template <typename B>
__global__ void index_select_kernel(const B* x, B* out, const int64_t* index, int64_t outer,
                                    int64_t n, int64_t k, int64_t inner) {
  const int64_t total = outer * k * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t c = e % inner;
    const int64_t rj = e / inner;
    const int64_t j = rj % k, o = rj / k;
    const int64_t v = index[j];
    if (v < 0 || v >= n) bad_index("index_select", v, n);
    out[e] = x[(o * n + v) * inner + c];
  }
}

// Rows of at least kRowThreads elements (embedding rows): blockIdx.y walks
// the rows r = o * k + j, so the index arithmetic is per row, not per
// element; the threads of x copy (or add) the row.
constexpr int kRowThreads = 128;

dim3 row_grid(int64_t rows, int64_t inner) {
  const int64_t x = (inner + kRowThreads - 1) / kRowThreads;
  return dim3(static_cast<unsigned>(x < 1024 ? x : 1024),
              static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

template <typename B>
__global__ void index_select_rows(const B* x, B* out, const int64_t* index, int64_t rows, int64_t n,
                                  int64_t k, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t o = r / k, j = r - o * k;
    const int64_t v = index[j];
    if (v < 0 || v >= n) bad_index("index_select", v, n);
    const B* src = x + (o * n + v) * inner;
    B* dst = out + r * inner;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < inner;
         c += step)
      dst[c] = src[c];
  }
}

template <typename T>
__global__ void index_add_rows(T* out, const int64_t* index, const T* src, int64_t rows, int64_t n,
                               int64_t k, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t o = r / k, j = r - o * k;
    const int64_t v = index[j];
    if (v < 0 || v >= n) bad_index("index_add", v, n);
    const T* s = src + r * inner;
    T* d = out + (o * n + v) * inner;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < inner;
         c += step)
      atomic_add(d + c, s[c]);
  }
}

template <typename T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer,
                                 int64_t n, int64_t k, int64_t inner) {
  const int64_t total = outer * k * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t c = e % inner;
    const int64_t rj = e / inner;
    const int64_t j = rj % k, o = rj / k;
    const int64_t v = index[j];
    if (v < 0 || v >= n) bad_index("index_add", v, n);
    T* dst = out + (o * n + v) * inner + c;
    if constexpr (std::is_same_v<T, int64_t>) {
      // Two's complement: the unsigned add is the signed one.
      atomicAdd(reinterpret_cast<unsigned long long*>(dst),
                static_cast<unsigned long long>(src[e]));
    } else {
      atomicAdd(dst, src[e]);
    }
  }
}

template <typename B>
struct GatherFn {
  B* out;
  const B* x;
  const int64_t* index;
  int64_t stride, n;
  __device__ void operator()(const int64_t (&o)[3]) const {
    const int64_t v = index[o[2]];
    if (v < 0 || v >= n) bad_index("gather", v, n);
    out[o[0]] = x[o[1] + v * stride];
  }
};

template <typename T>
struct ScatterAddFn {
  T* out;
  const T* src;
  const int64_t* index;
  int64_t stride, n;
  __device__ void operator()(const int64_t (&o)[3]) const {
    const int64_t v = index[o[2]];
    if (v < 0 || v >= n) bad_index("scatter_add", v, n);
    atomic_add(out + o[1] + v * stride, src[o[0]]);
  }
};

// cohort's Philox4x32-10 (random.cc's philox4x32), bit for bit.
struct Philox {
  uint32_t r[4];
  __device__ Philox(uint64_t block, uint64_t seed) {
    uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = 0,
             c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
    for (int round = 0; round < 10; ++round) {
      const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
      const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    r[0] = c0, r[1] = c1, r[2] = c2, r[3] = c3;
  }
};

// One thread per Philox block: 4 float32 lanes or 2 float64 lanes, the
// uniforms formed as random.cc's for_uniform forms them.
template <typename T>
__global__ void dropout_kernel(const T* x, T* out, T* mask, int64_t n, double keep, T scale,
                               uint64_t seed, uint64_t base) {
  constexpr int kLanes = std::is_same_v<T, float> ? 4 : 2;
  const int64_t blocks = (n + kLanes - 1) / kLanes;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += step) {
    const Philox r(base + static_cast<uint64_t>(b), seed);
#pragma unroll
    for (int l = 0; l < kLanes; ++l) {
      const int64_t i = b * kLanes + l;
      if (i >= n) break;
      double u;
      if constexpr (std::is_same_v<T, float>) {
        u = static_cast<double>(static_cast<float>(r.r[l] >> 8) * (1.0f / 16777216.0f));
      } else {
        const uint64_t v = (static_cast<uint64_t>(r.r[2 * l]) << 32) | r.r[2 * l + 1];
        u = static_cast<double>(v >> 11) * (1.0 / 9007199254740992.0);
      }
      const T m = u < keep ? scale : T(0);
      mask[i] = m;
      out[i] = x[i] * m;
    }
  }
}

template <typename T, typename K>
struct MaskedFillFn {
  T* out;
  const T* x;
  const K* mask;
  T value;
  __device__ void operator()(const int64_t (&o)[3]) const {
    out[o[0]] = mask[o[2]] != K(0) ? value : x[o[1]];
  }
};

template <typename B>
__global__ void triangle_kernel(const B* x, B* out, int64_t total, int64_t r, int64_t c,
                                int64_t diagonal, bool lower) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t j = e % c;
    const int64_t i = (e / c) % r;
    const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
    out[e] = keep ? x[e] : B(0);
  }
}

// Calls f(Tag<B>{}) with the unsigned integer of elem_size bytes.
template <typename F>
void dispatch_bits(size_t elem_size, const char* op, F&& f) {
  switch (elem_size) {
    case 1:
      return f(Tag<uint8_t>{});
    case 2:
      return f(Tag<uint16_t>{});
    case 4:
      return f(Tag<uint32_t>{});
    case 8:
      return f(Tag<uint64_t>{});
    default:
      throw_dtype(op, DType::kUInt8);
  }
}

// The element types index_add and scatter_add accumulate in (atomicAdd's).
template <typename F>
void dispatch_accumulate_types(DType t, const char* op, F&& f) {
  dispatch_types<float, double, int32_t, int64_t>(t, op, static_cast<F&&>(f));
}

template <typename T>
T host_value(double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace

void launch_index_select(size_t elem_size, const void* x, void* out, const int64_t* index,
                         int64_t outer, int64_t n, int64_t k, int64_t inner, cudaStream_t stream) {
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  dispatch_bits(elem_size, "index_select", [&](auto tag) {
    using B = typename decltype(tag)::type;
    if (inner >= kRowThreads) {
      index_select_rows<B><<<row_grid(outer * k, inner), kRowThreads, 0, stream>>>(
          static_cast<const B*>(x), static_cast<B*>(out), index, outer * k, n, k, inner);
    } else {
      index_select_kernel<B><<<grid_for(total), kThreads, 0, stream>>>(
          static_cast<const B*>(x), static_cast<B*>(out), index, outer, n, k, inner);
    }
    COHORT_CUDA_LAUNCH_CHECK();
  });
}

void launch_index_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, cudaStream_t stream) {
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (inner >= kRowThreads) {
      index_add_rows<T><<<row_grid(outer * k, inner), kRowThreads, 0, stream>>>(
          static_cast<T*>(out), index, static_cast<const T*>(src), outer * k, n, k, inner);
    } else {
      index_add_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
          static_cast<T*>(out), index, static_cast<const T*>(src), outer, n, k, inner);
    }
    COHORT_CUDA_LAUNCH_CHECK();
  };
  dispatch_accumulate_types(dtype, "index_add", run);
}

void launch_dropout(DType dtype, const void* x, void* out, void* mask, int64_t n, double p,
                    uint64_t seed, uint64_t block, cudaStream_t stream) {
  if (n == 0) return;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int64_t kLanes = std::is_same_v<T, float> ? 4 : 2;
    // The CPU's mask value: 1 times T(1 / (1 - p)).
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    dropout_kernel<T><<<grid_for((n + kLanes - 1) / kLanes), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), static_cast<T*>(mask), n, 1.0 - p, scale,
        seed, block);
    COHORT_CUDA_LAUNCH_CHECK();
  };
  dispatch_types<float, double>(dtype, "dropout", run);
}

void launch_masked_fill(DType dtype, void* out, const void* x, DType mask_dtype, const void* mask,
                        double value, const StridedPlan<3>& plan, int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto ktag) {
      using K = typename decltype(ktag)::type;
      launch_strided<3>(plan, n, stream,
                        MaskedFillFn<T, K>{static_cast<T*>(out), static_cast<const T*>(x),
                                           static_cast<const K*>(mask), host_value<T>(value)});
    };
    dispatch_types<uint8_t, int32_t, int64_t>(mask_dtype, "masked_fill (mask)", run);
  });
}

void launch_gather(size_t elem_size, void* out, const void* x, const int64_t* index,
                   int64_t x_dim_stride, int64_t n, const StridedPlan<3>& plan, int64_t count,
                   cudaStream_t stream) {
  dispatch_bits(elem_size, "gather", [&](auto tag) {
    using B = typename decltype(tag)::type;
    launch_strided<3>(
        plan, count, stream,
        GatherFn<B>{static_cast<B*>(out), static_cast<const B*>(x), index, x_dim_stride, n});
  });
}

void launch_scatter_add(DType dtype, void* out, const void* src, const int64_t* index,
                        int64_t out_dim_stride, int64_t n, const StridedPlan<3>& plan,
                        int64_t count, cudaStream_t stream) {
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<3>(plan, count, stream,
                      ScatterAddFn<T>{static_cast<T*>(out), static_cast<const T*>(src), index,
                                      out_dim_stride, n});
  };
  dispatch_accumulate_types(dtype, "scatter_add", run);
}

void launch_triangle(size_t elem_size, const void* x, void* out, int64_t batch, int64_t r,
                     int64_t c, int64_t diagonal, bool lower, cudaStream_t stream) {
  const int64_t total = batch * r * c;
  if (total == 0) return;
  dispatch_bits(elem_size, lower ? "tril" : "triu", [&](auto tag) {
    using B = typename decltype(tag)::type;
    triangle_kernel<B><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const B*>(x), static_cast<B*>(out), total, r, c, diagonal, lower);
    COHORT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace cohort::cuda
