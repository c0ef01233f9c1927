// Multi-tensor optimizer kernels (native/fused_optim.h on a CUDA device): a
// launch covers up to kMaxTensors tensors, whose pointers and sizes travel
// in the kernel's parameters (under the 4 KiB every driver takes); each block
// takes one chunk of kChunk elements of one tensor. The per-element formulas
// are optim/update_kernels.cc's loops in the parameters' dtype; nvcc
// contracts a*b+c into FMA as the CPU's avx2 / avx512 paths do, so results
// may differ from the reference loops in the last bit.
#include <cmath>

#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

constexpr int kMaxTensors = 48;
constexpr int64_t kChunk = 65536;
constexpr int kOptimThreads = kThreads;

struct Chunks {
  int count = 0;
  int block_start[kMaxTensors + 1] = {};
  int64_t n[kMaxTensors] = {};
  void* p[kMaxTensors] = {};
  const void* g[kMaxTensors] = {};
  void* a[kMaxTensors] = {};
  void* b[kMaxTensors] = {};
  void* c[kMaxTensors] = {};
  double s0[kMaxTensors] = {};
  double s1[kMaxTensors] = {};
};
static_assert(sizeof(Chunks) < 4000, "kernel parameters must stay under 4 KiB");

// The tensor and element range of this block.
struct Range {
  int t;
  int64_t lo, hi;
};

__device__ __forceinline__ Range block_range(const Chunks& ch) {
  int t = 0;
  while (static_cast<int>(blockIdx.x) >= ch.block_start[t + 1]) ++t;
  const int64_t lo = static_cast<int64_t>(blockIdx.x - ch.block_start[t]) * kChunk;
  const int64_t hi = lo + kChunk < ch.n[t] ? lo + kChunk : ch.n[t];
  return {t, lo, hi};
}

template <typename T>
__global__ void sgd_kernel(Chunks ch, SgdConsts k) {
  const Range r = block_range(ch);
  T* p = static_cast<T*>(ch.p[r.t]);
  const T* g = static_cast<const T*>(ch.g[r.t]);
  T* buf = static_cast<T*>(ch.a[r.t]);
  const bool first = ch.s0[r.t] != 0;
  const T lr = static_cast<T>(k.lr), momentum = static_cast<T>(k.momentum),
          damp1 = static_cast<T>(k.damp1), wd = static_cast<T>(k.weight_decay),
          sign = static_cast<T>(k.sign);
  for (int64_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
    T d = sign * g[i];
    if (k.has_weight_decay) d = d + wd * p[i];
    if (k.has_momentum) {
      const T m = first ? d : buf[i] * momentum + damp1 * d;
      buf[i] = m;
      d = k.nesterov ? d + momentum * m : m;
    }
    p[i] = p[i] - lr * d;
  }
}

template <typename T>
__global__ void adam_kernel(Chunks ch, AdamConsts k) {
  const Range r = block_range(ch);
  T* p = static_cast<T*>(ch.p[r.t]);
  const T* g = static_cast<const T*>(ch.g[r.t]);
  T* m = static_cast<T*>(ch.a[r.t]);
  T* v = static_cast<T*>(ch.b[r.t]);
  T* vmax = static_cast<T*>(ch.c[r.t]);
  const T sign = static_cast<T>(k.sign), wd = static_cast<T>(k.weight_decay),
          decay_factor = static_cast<T>(k.decay_factor), beta1 = static_cast<T>(k.beta1),
          beta2 = static_cast<T>(k.beta2), one_beta1 = static_cast<T>(k.one_beta1),
          one_beta2 = static_cast<T>(k.one_beta2), eps = static_cast<T>(k.eps),
          bc2_sqrt = static_cast<T>(ch.s0[r.t]), neg_step = static_cast<T>(ch.s1[r.t]);
  for (int64_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
    T pi = p[i];
    T gi = sign * g[i];
    if (k.decay == 1) gi = gi + wd * pi;
    if (k.decay == 2) pi = pi * decay_factor;
    const T mi = m[i] * beta1 + one_beta1 * gi;
    T vi = v[i] * beta2 + one_beta2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    if (k.amsgrad) {
      vi = vmax[i] < vi ? vi : vmax[i];
      vmax[i] = vi;
    }
    const T denom = d_sqrt(vi) / bc2_sqrt + eps;
    p[i] = pi + neg_step * (mi / denom);
  }
}

// norm kinds: 0 p = 2, 1 inf, 2 p = 1, 3 any other p.
__device__ __forceinline__ double norm_term(double x, int kind, double p) {
  switch (kind) {
    case 0:
      return x * x;
    case 1:
    case 2:
      return fabs(x);
    default:
      return pow(fabs(x), p);
  }
}

struct MaxOp {
  __device__ __forceinline__ double operator()(double a, double b) const {
    // A NaN wins, as in PyTorch's inf-norm (the CPU loop's std::max(acc, |x|)
    // passes over a NaN element instead).
    return a != a ? a : (b != b ? b : (a > b ? a : b));
  }
};

template <typename T>
__global__ void norm_partials(Chunks ch, int kind, double p, double* partial) {
  __shared__ double smem[kOptimThreads / 32];
  const Range r = block_range(ch);
  const T* x = static_cast<const T*>(ch.p[r.t]);
  double acc = 0;
  for (int64_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
    const double t = norm_term(static_cast<double>(x[i]), kind, p);
    acc = kind == 1 ? MaxOp{}(acc, t) : acc + t;
  }
  acc = kind == 1 ? group_all<kOptimThreads>(acc, MaxOp{}, smem)
                  : group_all<kOptimThreads>(acc, Plus{}, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void norm_finish(const double* partial, int64_t count, int kind, double p, double* out) {
  __shared__ double smem[kOptimThreads / 32];
  // Fixed slices per thread, combined in thread order: the same bits each run.
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    acc = kind == 1 ? MaxOp{}(acc, partial[i]) : acc + partial[i];
  acc = kind == 1 ? group_all<kOptimThreads>(acc, MaxOp{}, smem)
                  : group_all<kOptimThreads>(acc, Plus{}, smem);
  if (threadIdx.x == 0) {
    if (kind == 1)
      out[0] = acc;
    else if (kind == 0)
      out[0] = sqrt(acc);
    else if (kind == 2)
      out[0] = acc;
    else
      out[0] = pow(acc, 1.0 / p);
  }
}

template <typename T>
__global__ void scale_kernel(Chunks ch, const double* norm, double max_norm) {
  const double coef = max_norm / (norm[0] + 1e-6);
  if (coef >= 1.0) return;  // as the CPU: a NaN coefficient scales (poisons)
  const Range r = block_range(ch);
  T* x = static_cast<T*>(ch.p[r.t]);
  const T c = static_cast<T>(coef);
  for (int64_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) x[i] = x[i] * c;
}

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// Calls launch(chunks, blocks, first_block) for each batch of up to
// kMaxTensors non-empty tensors; first_block counts the blocks of earlier
// batches.
template <typename F>
void for_batches(const std::vector<FusedTensor>& tensors, F&& launch) {
  Chunks ch;
  int64_t first_block = 0;
  auto flush = [&] {
    if (ch.count == 0) return;
    launch(ch, ch.block_start[ch.count], first_block);
    first_block += ch.block_start[ch.count];
    ch = Chunks();
  };
  for (const FusedTensor& t : tensors) {
    if (t.n == 0) continue;
    const int i = ch.count;
    ch.n[i] = t.n;
    ch.p[i] = t.p;
    ch.g[i] = t.g;
    ch.a[i] = t.a;
    ch.b[i] = t.b;
    ch.c[i] = t.c;
    ch.s0[i] = t.s0;
    ch.s1[i] = t.s1;
    ch.block_start[i + 1] = ch.block_start[i] + static_cast<int>(chunks_of(t.n));
    ++ch.count;
    if (ch.count == kMaxTensors) flush();
  }
  flush();
}

// The optimizers' kernels run on float32 and float64 parameters.
template <typename F>
void dispatch_optim(DType dtype, const char* op, F&& f) {
  dispatch_types<float, double>(dtype, op, static_cast<F&&>(f));
}

int norm_kind(double p) {
  if (p == 2.0) return 0;
  if (std::isinf(p)) return 1;
  if (p == 1.0) return 2;
  return 3;
}

}  // namespace

void launch_sgd_step(DType dtype, const std::vector<FusedTensor>& tensors, const SgdConsts& c,
                     cudaStream_t stream) {
  dispatch_optim(dtype, "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_batches(tensors, [&](const Chunks& ch, int blocks, int64_t) {
      sgd_kernel<T><<<blocks, kOptimThreads, 0, stream>>>(ch, c);
      COHORT_CUDA_LAUNCH_CHECK();
    });
  });
}

void launch_adam_step(DType dtype, const std::vector<FusedTensor>& tensors, const AdamConsts& c,
                      cudaStream_t stream) {
  dispatch_optim(dtype, "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_batches(tensors, [&](const Chunks& ch, int blocks, int64_t) {
      adam_kernel<T><<<blocks, kOptimThreads, 0, stream>>>(ch, c);
      COHORT_CUDA_LAUNCH_CHECK();
    });
  });
}

int64_t total_norm_scratch(const std::vector<FusedTensor>& tensors) {
  int64_t blocks = 0;
  for (const FusedTensor& t : tensors) blocks += chunks_of(t.n);
  return blocks > 0 ? blocks : 1;
}

void launch_total_norm(DType dtype, const std::vector<FusedTensor>& tensors, double p,
                       double* scratch, double* out, cudaStream_t stream) {
  const int kind = norm_kind(p);
  int64_t total_blocks = 0;
  dispatch_optim(dtype, "total_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_batches(tensors, [&](const Chunks& ch, int blocks, int64_t first_block) {
      norm_partials<T><<<blocks, kOptimThreads, 0, stream>>>(ch, kind, p, scratch + first_block);
      COHORT_CUDA_LAUNCH_CHECK();
      total_blocks = first_block + blocks;
    });
  });
  norm_finish<<<1, kOptimThreads, 0, stream>>>(scratch, total_blocks, kind, p, out);
  COHORT_CUDA_LAUNCH_CHECK();
}

void launch_scale_by_norm(DType dtype, const std::vector<FusedTensor>& tensors, const double* norm,
                          double max_norm, cudaStream_t stream) {
  dispatch_optim(dtype, "scale_by_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_batches(tensors, [&](const Chunks& ch, int blocks, int64_t) {
      scale_kernel<T><<<blocks, kOptimThreads, 0, stream>>>(ch, norm, max_norm);
      COHORT_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace cohort::cuda
