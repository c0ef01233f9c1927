// StridedPlan: how an elementwise kernel finds its operands. An op over an
// output shape with K operands (the output first, then the inputs, each with
// its own strides in elements, 0 on broadcast dims) is described by the
// output's sizes and the K stride rows, after the dims that can be merged are
// merged (size-1 dims dropped; neighbours merged where every operand steps
// through them as one run), so a contiguous op is one dim and a bias add two.
// A thread of the kernel turns its linear index into K element offsets with
// one division per merged dim (32-bit ones when the op has under 2^32
// elements).
//
// This header is shared by the host code (.cc, built by the C++ compiler) and
// the kernels (.cu, built by nvcc); it includes nothing of cohort but shape.h,
// because nvcc cannot parse the fmt-based headers.
// Thread safety: plain values.
#pragma once

#include <array>
#include <cstdint>

#include "cohort/core/dtype.h"
#include "cohort/core/shape.h"

#if defined(__CUDACC__)
#define COHORT_HOST_DEVICE __host__ __device__
#else
#define COHORT_HOST_DEVICE
#endif

namespace cohort::cuda {

// After merging; ops that need more throw NotSupported (make_plan).
inline constexpr int kMaxDims = 8;

template <int K>
struct StridedPlan {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[K][kMaxDims] = {};

  // Element offsets of the operands for the output's row-major index i.
  COHORT_HOST_DEVICE void offsets(int64_t i, int64_t (&off)[K]) const {
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 1; --d) {
      const int64_t q = i / sizes[d];
      const int64_t r = i - q * sizes[d];
      i = q;
      for (int k = 0; k < K; ++k) off[k] += r * strides[k][d];
    }
    if (ndim > 0)
      for (int k = 0; k < K; ++k) off[k] += i * strides[k][0];
  }

  // The same for plans of fewer than 2^32 elements, with 32-bit divisions
  // (several times cheaper on a GPU than 64-bit ones).
  COHORT_HOST_DEVICE void offsets32(uint32_t i, int64_t (&off)[K]) const {
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 1; --d) {
      const uint32_t size = static_cast<uint32_t>(sizes[d]);
      const uint32_t q = i / size;
      const int64_t r = static_cast<int64_t>(i - q * size);
      i = q;
      for (int k = 0; k < K; ++k) off[k] += r * strides[k][d];
    }
    if (ndim > 0)
      for (int k = 0; k < K; ++k) off[k] += static_cast<int64_t>(i) * strides[k][0];
  }
};

[[noreturn]] void throw_too_many_dims(const char* op, int ndim);
// NotSupported: `op` has no CUDA kernel for dtype `t`.
[[noreturn]] void throw_dtype(const char* op, DType t);

// The plan for `sizes` and K stride rows of the same length (broadcast
// strides: 0 where an operand repeats). Throws NotSupported naming `op` when
// more than kMaxDims dims remain after merging.
template <int K>
StridedPlan<K> make_plan(const Shape& sizes, const std::array<Shape, K>& strides, const char* op) {
  StridedPlan<K> p;
  // Innermost first, then reversed.
  int64_t sz[64];
  int64_t st[K][64];
  int n = 0;
  for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < K && merge; ++k) merge = strides[k][d] == st[k][n - 1] * sz[n - 1];
    if (merge) {
      sz[n - 1] *= sizes[d];
      continue;
    }
    if (n == 64) throw_too_many_dims(op, static_cast<int>(sizes.size()));
    sz[n] = sizes[d];
    for (int k = 0; k < K; ++k) st[k][n] = strides[k][d];
    ++n;
  }
  if (n > kMaxDims) throw_too_many_dims(op, n);
  p.ndim = n;
  for (int i = 0; i < n; ++i) {
    p.sizes[i] = sz[n - 1 - i];
    for (int k = 0; k < K; ++k) p.strides[k][i] = st[k][n - 1 - i];
  }
  return p;
}

// True when every operand of the plan is dense in the output's order (one
// merged dim with unit strides, or no dims at all).
template <int K>
bool plan_is_dense(const StridedPlan<K>& p) {
  if (p.ndim == 0) return true;
  if (p.ndim != 1) return false;
  for (int k = 0; k < K; ++k)
    if (p.strides[k][0] != 1) return false;
  return true;
}

}  // namespace cohort::cuda
