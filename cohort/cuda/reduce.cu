// Reduction kernels (native/reduce.h on a CUDA device): sums over rows or
// columns of a contiguous view in two passes (chunks of a row, or splits of
// the column's rows, each reduced by one block with cub::BlockReduce into an
// 8-byte accumulator, then the partials added in order by one thread per
// output), and max / min with the index of the first occurrence, one block
// per row.
#include <cub/block/block_reduce.cuh>

#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

constexpr int kReduceThreads = 256;
// Elements a block sums per row chunk before the row is split further.
constexpr int64_t kChunk = 16384;
constexpr int64_t kMaxChunks = 1024;
// Column blocks: 32 columns x 8 row lanes.
constexpr int kColumns = 32;
constexpr int kLanes = 8;
constexpr int64_t kRowsPerSplit = 512;
constexpr int64_t kMaxSplits = 256;

template <typename T>
using AccOf = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

// partial[row * chunks + chunk] = sum of that chunk of the row.
template <typename T>
__global__ void row_partials(const T* x, int64_t rows, int64_t inner, int64_t chunks,
                             AccOf<T>* partial) {
  using Acc = AccOf<T>;
  using Reduce = cub::BlockReduce<Acc, kReduceThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t blocks = rows * chunks;
  const int64_t len = (inner + chunks - 1) / chunks;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t row = b / chunks, chunk = b - row * chunks;
    const int64_t lo = chunk * len;
    const int64_t hi = lo + len < inner ? lo + len : inner;
    const T* p = x + row * inner;
    Acc acc = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kReduceThreads) acc += convert<Acc>(p[i]);
    const Acc total = Reduce(tmp).Sum(acc);
    if (threadIdx.x == 0) partial[b] = total;
    __syncthreads();  // tmp is reused by the next block-row
  }
}

// out[i] = scale * sum_k partial[i * parts + k], in k order.
template <typename Acc, typename O>
__global__ void finish_sums(const Acc* partial, int64_t outputs, int64_t parts, int64_t stride_k,
                            int64_t stride_i, O* out, double scale) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < outputs;
       i += step) {
    Acc acc = 0;
    for (int64_t k = 0; k < parts; ++k) acc += partial[i * stride_i + k * stride_k];
    if constexpr (std::is_integral_v<Acc>) {
      out[i] = convert<O>(acc);
    } else {
      out[i] = convert<O>(scale == 1.0 ? acc : acc * scale);
    }
  }
}

// partial[split * cols + c] = sum of column c over that split's rows.
template <typename T>
__global__ void column_partials(const T* x, int64_t inner, int64_t cols, int64_t splits,
                                AccOf<T>* partial) {
  using Acc = AccOf<T>;
  __shared__ Acc sums[kLanes][kColumns];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t len = (inner + splits - 1) / splits;
  const int64_t lo = static_cast<int64_t>(blockIdx.y) * len;
  const int64_t hi = lo + len < inner ? lo + len : inner;
  Acc acc = 0;
  if (c < cols)
    for (int64_t r = lo + threadIdx.y; r < hi; r += kLanes) acc += convert<Acc>(x[r * cols + c]);
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    Acc total = 0;
    for (int k = 0; k < kLanes; ++k) total += sums[k][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = total;
  }
}

// The reduction order of max/min: a NaN beats numbers, ties and NaN pairs go
// to the lower index, an empty slot (index -1) loses.
template <typename M>
struct Best {
  M v;
  int64_t i;
};

template <bool kMax, typename M>
__device__ __forceinline__ Best<M> pick(const Best<M>& a, const Best<M>& b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) {
    if (an && bn) return a.i < b.i ? a : b;
    return an ? a : b;
  }
  if (kMax ? a.v > b.v : a.v < b.v) return a;
  if (kMax ? b.v > a.v : b.v < a.v) return b;
  return a.i < b.i ? a : b;
}

template <bool kMax, typename M>
struct PickOp {
  __device__ __forceinline__ Best<M> operator()(const Best<M>& a, const Best<M>& b) const {
    return pick<kMax>(a, b);
  }
};

template <bool kMax, typename T>
__global__ void extreme_rows(const T* x, int64_t rows, int64_t n, T* values, int64_t* indices) {
  using M = MathOf<T>;
  using Reduce = cub::BlockReduce<Best<M>, kReduceThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = x + row * n;
    Best<M> best{M(0), -1};
    for (int64_t i = threadIdx.x; i < n; i += kReduceThreads)
      best = pick<kMax>(best, Best<M>{convert<M>(p[i]), i});
    const Best<M> r = Reduce(tmp).Reduce(best, PickOp<kMax, M>{});
    if (threadIdx.x == 0) {
      values[row] = p[r.i];
      indices[row] = r.i;
    }
    __syncthreads();
  }
}

unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(work < (1 << 20) ? (work > 0 ? work : 1) : (1 << 20));
}

template <typename F>
void dispatch_sum_out(DType out_dtype, F&& f) {
  switch (out_dtype) {
    case DType::kFloat32:
      return f(Tag<float>{});
    case DType::kFloat64:
      return f(Tag<double>{});
    case DType::kBFloat16:
      return f(Tag<__nv_bfloat16>{});
    case DType::kInt64:
      return f(Tag<int64_t>{});
    default:
      throw_dtype("sum", out_dtype);
  }
}

}  // namespace

int64_t row_sum_chunks(int64_t rows, int64_t inner) {
  // Few rows: split them so that the grid fills the device.
  if (rows >= 256) return 1;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  return chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
}

int64_t column_sum_splits(int64_t inner, int64_t cols) {
  (void)cols;
  const int64_t splits = (inner + kRowsPerSplit - 1) / kRowsPerSplit;
  return splits < 1 ? 1 : (splits > kMaxSplits ? kMaxSplits : splits);
}

void launch_sum_rows(DType dtype, const void* x, int64_t rows, int64_t inner, DType out_dtype,
                     void* out, double scale, void* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  const int64_t chunks = row_sum_chunks(rows, inner);
  dispatch_arith_types(dtype, "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccOf<T>;
    Acc* partial = static_cast<Acc*>(scratch);
    row_partials<T><<<blocks_for(rows * chunks), kReduceThreads, 0, stream>>>(
        static_cast<const T*>(x), rows, inner, chunks, partial);
    COHORT_CUDA_LAUNCH_CHECK();
    dispatch_sum_out(out_dtype, [&](auto otag) {
      using O = typename decltype(otag)::type;
      finish_sums<Acc, O><<<grid_for(rows), kThreads, 0, stream>>>(partial, rows, chunks, 1, chunks,
                                                                   static_cast<O*>(out), scale);
      COHORT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_sum_columns(DType dtype, const void* x, int64_t inner, int64_t cols, DType out_dtype,
                        void* out, double scale, void* scratch, cudaStream_t stream) {
  if (cols == 0) return;
  const int64_t splits = column_sum_splits(inner, cols);
  const int64_t xblocks = (cols + kColumns - 1) / kColumns;
  dispatch_arith_types(dtype, "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccOf<T>;
    Acc* partial = static_cast<Acc*>(scratch);
    column_partials<T><<<dim3(static_cast<unsigned>(xblocks), static_cast<unsigned>(splits)),
                         dim3(kColumns, kLanes), 0, stream>>>(static_cast<const T*>(x), inner, cols,
                                                              splits, partial);
    COHORT_CUDA_LAUNCH_CHECK();
    dispatch_sum_out(out_dtype, [&](auto otag) {
      using O = typename decltype(otag)::type;
      finish_sums<Acc, O><<<grid_for(cols), kThreads, 0, stream>>>(partial, cols, splits, cols, 1,
                                                                   static_cast<O*>(out), scale);
      COHORT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_extreme_rows(bool is_max, DType dtype, const void* x, int64_t rows, int64_t n,
                         void* values, int64_t* indices, cudaStream_t stream) {
  if (rows == 0) return;
  dispatch_arith_types(dtype, is_max ? "max" : "min", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x);
    T* pv = static_cast<T*>(values);
    if (is_max) {
      extreme_rows<true, T>
          <<<blocks_for(rows), kReduceThreads, 0, stream>>>(px, rows, n, pv, indices);
    } else {
      extreme_rows<false, T>
          <<<blocks_for(rows), kReduceThreads, 0, stream>>>(px, rows, n, pv, indices);
    }
    COHORT_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace cohort::cuda
