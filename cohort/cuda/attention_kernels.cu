// Causal (or full) scaled dot-product attention in the flash-attention-2 way
// (dense_kernels.h). Tiles of kTile rows; one thread owns one query row
// (forward, dq) or one key row (dk, dv), its output row in registers, and
// the block walks the tiles of the other side through shared memory (rows
// padded by one float against bank conflicts). Softmax statistics, sums and
// accumulation are float32 whatever the operands' dtype.
// Written for clarity: 32-thread blocks and per-key softmax updates, not the
// tensor-core kernels of the FlashAttention papers.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {
namespace {

constexpr int kTile = 32;  // rows per tile, and threads per block

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }

template <class T>
__device__ inline T* head(const AttentionHeads& a, int64_t bh) {
  return static_cast<T*>(a.data) + (bh / a.heads) * a.batch_stride + (bh % a.heads) * a.head_stride;
}

// Rows [r0, r0 + kTile) of a head into a [kTile][d + 1] float tile (zeros
// past `rows`), by the whole block, coalesced along each row.
template <class T>
__device__ void load_tile(float* tile, const T* h, int64_t row_stride, int64_t r0, int64_t rows,
                          int d) {
  for (int idx = threadIdx.x; idx < kTile * d; idx += blockDim.x) {
    const int r = idx / d, c = idx % d;
    tile[r * (d + 1) + c] = r0 + r < rows ? load(h, (r0 + r) * row_stride + c) : 0.0f;
  }
}

template <int D>
__device__ inline float dot(const float* a, const float* b, int d) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < D; ++e)
    if (e < d) s += a[e] * b[e];
  return s;
}

template <class T, int D>
__global__ void attention_forward_kernel(AttentionDims s, AttentionHeads q, AttentionHeads k,
                                         AttentionHeads v, AttentionHeads o, float* lse) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.head_dim), w = d + 1;
  float* qs = smem;
  float* ks = qs + kTile * w;
  float* vs = ks + kTile * w;
  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, i = q0 + threadIdx.x;
  const bool active = i < s.q_len;
  const T* kh = head<const T>(k, bh);
  const T* vh = head<const T>(v, bh);
  load_tile(qs, head<const T>(q, bh), q.row_stride, q0, s.q_len, d);
  const float* qrow = qs + threadIdx.x * w;
  float acc[D];
#pragma unroll
  for (int e = 0; e < D; ++e) acc[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  // Causal: no key after the tile's last query is seen by any of its rows.
  const int64_t kv_end = s.causal ? min(s.kv_len, q0 + kTile) : s.kv_len;
  for (int64_t k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();  // the previous tiles are consumed (and qs is loaded)
    load_tile(ks, kh, k.row_stride, k0, s.kv_len, d);
    load_tile(vs, vh, v.row_stride, k0, s.kv_len, d);
    __syncthreads();
    if (!active) continue;
    const int kn = static_cast<int>(min(int64_t{kTile}, kv_end - k0));
    for (int c = 0; c < kn; ++c) {
      if (s.causal && k0 + c > i) break;
      const float sc = dot<D>(qrow, ks + c * w, d) * s.scale;
      if (sc > m) {  // a new maximum: rescale what was summed so far
        const float corr = expf(m - sc);
        l *= corr;
#pragma unroll
        for (int e = 0; e < D; ++e) acc[e] *= corr;
        m = sc;
      }
      const float p = expf(sc - m);
      l += p;
      const float* vrow = vs + c * w;
#pragma unroll
      for (int e = 0; e < D; ++e)
        if (e < d) acc[e] += p * vrow[e];
    }
  }
  if (!active) return;
  T* orow = head<T>(o, bh) + i * o.row_stride;
  const float inv = 1.0f / l;
#pragma unroll
  for (int e = 0; e < D; ++e)
    if (e < d) store(orow, e, acc[e] * inv);
  lse[bh * s.q_len + i] = m + logf(l);
}

// delta[bh, i] = sum over e of dout[i, e] * out[i, e].
template <class T>
__global__ void attention_delta_kernel(AttentionDims s, AttentionHeads o, AttentionHeads dout,
                                       float* delta) {
  const int64_t bh = blockIdx.y, i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= s.q_len) return;
  const T* orow = head<const T>(o, bh) + i * o.row_stride;
  const T* grow = head<const T>(dout, bh) + i * dout.row_stride;
  float sum = 0.0f;
  for (int64_t e = 0; e < s.head_dim; ++e) sum += load(orow, e) * load(grow, e);
  delta[bh * s.q_len + i] = sum;
}

// One block per tile of keys: dk and dv of its keys over every query that
// sees them.
template <class T, int D>
__global__ void attention_dkdv_kernel(AttentionDims s, AttentionHeads q, AttentionHeads k,
                                      AttentionHeads v, const float* lse, AttentionHeads dout,
                                      const float* delta, AttentionHeads dk, AttentionHeads dv) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.head_dim), w = d + 1;
  float* ks = smem;
  float* vs = ks + kTile * w;
  float* qs = vs + kTile * w;
  float* gs = qs + kTile * w;
  float* ls = gs + kTile * w;  // the query tile's lse
  float* ds = ls + kTile;      // and delta
  const int64_t bh = blockIdx.y, k0 = int64_t{blockIdx.x} * kTile, j = k0 + threadIdx.x;
  const bool active = j < s.kv_len;
  const T* qh = head<const T>(q, bh);
  const T* gh = head<const T>(dout, bh);
  load_tile(ks, head<const T>(k, bh), k.row_stride, k0, s.kv_len, d);
  load_tile(vs, head<const T>(v, bh), v.row_stride, k0, s.kv_len, d);
  const float* krow = ks + threadIdx.x * w;
  const float* vrow = vs + threadIdx.x * w;
  float gk[D], gv[D];
#pragma unroll
  for (int e = 0; e < D; ++e) gk[e] = gv[e] = 0.0f;
  // Causal: queries before the tile's first key see none of its keys.
  const int64_t q_start = s.causal ? (k0 / kTile) * kTile : 0;
  for (int64_t q0 = q_start; q0 < s.q_len; q0 += kTile) {
    __syncthreads();
    load_tile(qs, qh, q.row_stride, q0, s.q_len, d);
    load_tile(gs, gh, dout.row_stride, q0, s.q_len, d);
    if (threadIdx.x < kTile) {
      const int64_t i = q0 + threadIdx.x;
      ls[threadIdx.x] = i < s.q_len ? lse[bh * s.q_len + i] : 0.0f;
      ds[threadIdx.x] = i < s.q_len ? delta[bh * s.q_len + i] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const int qn = static_cast<int>(min(int64_t{kTile}, s.q_len - q0));
    for (int r = 0; r < qn; ++r) {
      if (s.causal && q0 + r < j) continue;
      const float* qrow = qs + r * w;
      const float* grow = gs + r * w;
      const float p = expf(dot<D>(qrow, krow, d) * s.scale - ls[r]);
      const float dsc = p * (dot<D>(grow, vrow, d) - ds[r]) * s.scale;
#pragma unroll
      for (int e = 0; e < D; ++e)
        if (e < d) {
          gv[e] += p * grow[e];
          gk[e] += dsc * qrow[e];
        }
    }
  }
  if (!active) return;
  T* gkrow = head<T>(dk, bh) + j * dk.row_stride;
  T* gvrow = head<T>(dv, bh) + j * dv.row_stride;
#pragma unroll
  for (int e = 0; e < D; ++e)
    if (e < d) {
      store(gkrow, e, gk[e]);
      store(gvrow, e, gv[e]);
    }
}

// One block per tile of queries: dq of its queries over every key they see.
template <class T, int D>
__global__ void attention_dq_kernel(AttentionDims s, AttentionHeads q, AttentionHeads k,
                                    AttentionHeads v, const float* lse, AttentionHeads dout,
                                    const float* delta, AttentionHeads dq) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(s.head_dim), w = d + 1;
  float* qs = smem;
  float* gs = qs + kTile * w;
  float* ks = gs + kTile * w;
  float* vs = ks + kTile * w;
  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, i = q0 + threadIdx.x;
  const bool active = i < s.q_len;
  const T* kh = head<const T>(k, bh);
  const T* vh = head<const T>(v, bh);
  load_tile(qs, head<const T>(q, bh), q.row_stride, q0, s.q_len, d);
  load_tile(gs, head<const T>(dout, bh), dout.row_stride, q0, s.q_len, d);
  const float* qrow = qs + threadIdx.x * w;
  const float* grow = gs + threadIdx.x * w;
  const float li = active ? lse[bh * s.q_len + i] : 0.0f;
  const float di = active ? delta[bh * s.q_len + i] : 0.0f;
  float gq[D];
#pragma unroll
  for (int e = 0; e < D; ++e) gq[e] = 0.0f;
  const int64_t kv_end = s.causal ? min(s.kv_len, q0 + kTile) : s.kv_len;
  for (int64_t k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    load_tile(ks, kh, k.row_stride, k0, s.kv_len, d);
    load_tile(vs, vh, v.row_stride, k0, s.kv_len, d);
    __syncthreads();
    if (!active) continue;
    const int kn = static_cast<int>(min(int64_t{kTile}, kv_end - k0));
    for (int c = 0; c < kn; ++c) {
      if (s.causal && k0 + c > i) break;
      const float* krow = ks + c * w;
      const float p = expf(dot<D>(qrow, krow, d) * s.scale - li);
      const float dsc = p * (dot<D>(grow, vs + c * w, d) - di) * s.scale;
#pragma unroll
      for (int e = 0; e < D; ++e)
        if (e < d) gq[e] += dsc * krow[e];
    }
  }
  if (!active) return;
  T* row = head<T>(dq, bh) + i * dq.row_stride;
#pragma unroll
  for (int e = 0; e < D; ++e)
    if (e < d) store(row, e, gq[e]);
}

// Dynamic shared memory of `tiles` padded tiles and `extra` floats; above
// the default 48 KiB a kernel must opt in.
template <class Kernel>
size_t shared_bytes(Kernel kernel, int d, int tiles, int extra) {
  const size_t bytes = (size_t{kTile} * (d + 1) * tiles + extra) * sizeof(float);
  if (bytes > 48 * 1024)
    COHORT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
  return bytes;
}

dim3 grid(int64_t rows, int64_t batch_heads) {
  return dim3(static_cast<unsigned>((rows + kTile - 1) / kTile),
              static_cast<unsigned>(batch_heads));
}

template <class T, int D>
void forward(const AttentionDims& s, AttentionHeads q, AttentionHeads k, AttentionHeads v,
             AttentionHeads o, float* lse, cudaStream_t stream) {
  auto kernel = attention_forward_kernel<T, D>;
  const size_t bytes = shared_bytes(kernel, static_cast<int>(s.head_dim), 3, 0);
  kernel<<<grid(s.q_len, s.batch_heads), kTile, bytes, stream>>>(s, q, k, v, o, lse);
  COHORT_CUDA_LAUNCH_CHECK();
}

template <class T, int D>
void backward(const AttentionDims& s, AttentionHeads q, AttentionHeads k, AttentionHeads v,
              AttentionHeads o, const float* lse, AttentionHeads dout, AttentionHeads dq,
              AttentionHeads dk, AttentionHeads dv, float* delta, cudaStream_t stream) {
  const int d = static_cast<int>(s.head_dim);
  if (s.q_len > 0) {
    attention_delta_kernel<T>
        <<<grid(s.q_len, s.batch_heads), kTile, 0, stream>>>(s, o, dout, delta);
    COHORT_CUDA_LAUNCH_CHECK();
  }
  // With no queries dk and dv are zeros, which the kernel writes.
  if (s.kv_len > 0) {
    auto dkdv = attention_dkdv_kernel<T, D>;
    const size_t bytes = shared_bytes(dkdv, d, 4, 2 * kTile);
    dkdv<<<grid(s.kv_len, s.batch_heads), kTile, bytes, stream>>>(s, q, k, v, lse, dout, delta, dk,
                                                                  dv);
    COHORT_CUDA_LAUNCH_CHECK();
  }
  if (s.q_len == 0) return;
  auto dqk = attention_dq_kernel<T, D>;
  const size_t bytes = shared_bytes(dqk, d, 4, 0);
  dqk<<<grid(s.q_len, s.batch_heads), kTile, bytes, stream>>>(s, q, k, v, lse, dout, delta, dq);
  COHORT_CUDA_LAUNCH_CHECK();
}

// f(T{}, D) with the element type and the smallest compiled head size >= d.
template <class F>
void dispatch(DType dtype, int64_t d, F f) {
  auto with_dim = [&](auto tag) {
    if (d <= 32)
      f(tag, std::integral_constant<int, 32>{});
    else if (d <= 64)
      f(tag, std::integral_constant<int, 64>{});
    else
      f(tag, std::integral_constant<int, 128>{});
  };
  if (dtype == DType::kBFloat16)
    with_dim(__nv_bfloat16{});
  else
    with_dim(float{});
}

}  // namespace

void launch_attention_forward(DType dtype, const AttentionDims& s, AttentionHeads q,
                              AttentionHeads k, AttentionHeads v, AttentionHeads out, float* lse,
                              cudaStream_t stream) {
  if (s.batch_heads == 0 || s.q_len == 0) return;
  dispatch(dtype, s.head_dim, [&](auto t, auto dim) {
    forward<decltype(t), decltype(dim)::value>(s, q, k, v, out, lse, stream);
  });
}

void launch_attention_backward(DType dtype, const AttentionDims& s, AttentionHeads q,
                               AttentionHeads k, AttentionHeads v, AttentionHeads out,
                               const float* lse, AttentionHeads dout, AttentionHeads dq,
                               AttentionHeads dk, AttentionHeads dv, float* delta,
                               cudaStream_t stream) {
  if (s.batch_heads == 0) return;
  dispatch(dtype, s.head_dim, [&](auto t, auto dim) {
    backward<decltype(t), decltype(dim)::value>(s, q, k, v, out, lse, dout, dq, dk, dv, delta,
                                                stream);
  });
}

}  // namespace cohort::cuda
