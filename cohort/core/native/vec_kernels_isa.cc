// The loops of vec_kernels.h compiled for one ISA: the reference's scalar
// formulas (elementwise.cc, reduce.cc) as plain loops over contiguous
// float32, which the compiler vectorizes (ymm / zmm).
#include <cstdint>

#include "cohort/base/isa.h"
#include "cohort/core/native/vec_kernels.h"

COHORT_ISA_BEGIN
namespace cohort::native::COHORT_ISA_NS {
namespace {

// The formulas of elementwise.cc's with_binary, in BinaryOp order.
template <int kOp>
inline float apply(float x, float y) {
  if constexpr (kOp == 0) return x + y;
  if constexpr (kOp == 1) return x - y;
  if constexpr (kOp == 2) return x * y;
  if constexpr (kOp == 3) return x / y;
  if constexpr (kOp == 4) return x > y || x != x ? x : y;
  if constexpr (kOp == 5) return x < y || x != x ? x : y;
}

template <int kOp, int kForm>
void binary(const float* __restrict a, const float* __restrict b, float* __restrict out,
            int64_t n) {
  if constexpr (kForm == 0) {
    for (int64_t i = 0; i < n; ++i) out[i] = apply<kOp>(a[i], b[i]);
  } else if constexpr (kForm == 1) {
    const float v = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = apply<kOp>(a[i], v);
  } else {
    const float v = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = apply<kOp>(v, b[i]);
  }
}

void neg(const float* __restrict x, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = -x[i];
}

void abs(const float* __restrict x, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] < 0.0f ? -x[i] : x[i];
}

void relu(const float* __restrict x, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* __restrict grad, const float* __restrict out, float* __restrict r,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) r[i] = out[i] > 0.0f ? grad[i] : 0.0f;
}

// acc[k] += acc[k + W] for k < W, then W / 2, ... 1: a pairwise sum of the
// 2W accumulators into acc[0], each level one or two vector adds.
template <int W>
void fold(double* acc) {
  for (int k = 0; k < W; ++k) acc[k] += acc[k + W];
  if constexpr (W > 1) fold<W / 2>(acc);
}

// Independent double accumulators, 4 ymm / 4 zmm add chains (the
// reference's 8 would leave AVX2 with 2 chains, no faster than SSE), seeded
// with the first block (no zeroing pass), combined pairwise, then the tail.
#if defined(COHORT_ISA_AVX512)
constexpr int kSumLanes = 32;
#else
constexpr int kSumLanes = 16;
#endif

double row_sum(const float* __restrict x, int64_t n) {
  if (n < kSumLanes) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
    return s;
  }
  double acc[kSumLanes];
  for (int k = 0; k < kSumLanes; ++k) acc[k] = static_cast<double>(x[k]);
  int64_t i = kSumLanes;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int k = 0; k < kSumLanes; ++k) acc[k] += static_cast<double>(x[i + k]);
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]);
  fold<kSumLanes / 2>(acc);
  return acc[0] + tail;
}

void add_row(const float* __restrict row, double* __restrict acc, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(row[j]);
}

template <int kOp>
constexpr VecKernels::Binary kForms[3] = {&binary<kOp, 0>, &binary<kOp, 1>, &binary<kOp, 2>};

}  // namespace

extern const VecKernels kVecKernels;
const VecKernels kVecKernels{{{kForms<0>[0], kForms<0>[1], kForms<0>[2]},
                              {kForms<1>[0], kForms<1>[1], kForms<1>[2]},
                              {kForms<2>[0], kForms<2>[1], kForms<2>[2]},
                              {kForms<3>[0], kForms<3>[1], kForms<3>[2]},
                              {kForms<4>[0], kForms<4>[1], kForms<4>[2]},
                              {kForms<5>[0], kForms<5>[1], kForms<5>[2]}},
                             &neg,
                             &abs,
                             &relu,
                             &relu_backward,
                             &row_sum,
                             &add_row};

}  // namespace cohort::native::COHORT_ISA_NS
COHORT_ISA_END
