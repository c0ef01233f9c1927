// StridedPlan (strided.h), the operand addressing of every pointwise kernel,
// checked on the host (no GPU needed): merged dims and, for every element,
// the same offsets as the unmerged strides give.
#include "cohort/cuda/strided.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"
#include "cohort/core/loops.h"

namespace cohort::cuda {
namespace {

// The offsets of operand k at the output's row-major index i, from the
// unmerged sizes and strides.
int64_t brute_offset(const Shape& sizes, const Shape& strides, int64_t i) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

template <int K>
void expect_same_offsets(const Shape& sizes, const std::array<Shape, K>& strides) {
  StridedPlan<K> plan = make_plan<K>(sizes, strides, "test");
  for (int64_t i = 0; i < shape_numel(sizes); ++i) {
    int64_t off[K], off32[K];
    plan.offsets(i, off);
    plan.offsets32(static_cast<uint32_t>(i), off32);
    for (int k = 0; k < K; ++k) {
      ASSERT_EQ(off[k], brute_offset(sizes, strides[k], i)) << "operand " << k << " index " << i;
      ASSERT_EQ(off32[k], off[k]) << "operand " << k << " index " << i;
    }
  }
}

TEST(StridedPlan, ContiguousOperandsMergeToOneDim) {
  const Shape sizes{3, 4, 5};
  const Shape st = contiguous_strides(sizes);
  StridedPlan<2> plan = make_plan<2>(sizes, {st, st}, "test");
  EXPECT_EQ(plan.ndim, 1);
  EXPECT_EQ(plan.sizes[0], 60);
  EXPECT_TRUE(plan_is_dense(plan));
  expect_same_offsets<2>(sizes, {st, st});
}

TEST(StridedPlan, BroadcastAndTransposedOperands) {
  // A bias [5] over [3, 4, 5]: the bias repeats, so two dims remain.
  const Shape sizes{3, 4, 5};
  const Shape out = contiguous_strides(sizes);
  const Shape bias = broadcast_strides({5}, {1}, sizes);
  StridedPlan<2> plan = make_plan<2>(sizes, {out, bias}, "test");
  EXPECT_EQ(plan.ndim, 2);
  EXPECT_FALSE(plan_is_dense(plan));
  expect_same_offsets<2>(sizes, {out, bias});
  // A transposed operand and a column broadcast.
  const Shape tr{1, 3, 12};  // [3, 4, 5] read from a [5, 4, 3] tensor
  const Shape col = broadcast_strides({3, 4, 1}, {4, 1, 1}, sizes);
  expect_same_offsets<3>(sizes, {out, tr, col});
  // Size-1 dims and a 0-d shape.
  expect_same_offsets<2>({1, 7, 1, 2}, {Shape{14, 2, 2, 1}, Shape{0, 1, 0, 7}});
  StridedPlan<1> scalar = make_plan<1>({}, {Shape{}}, "test");
  EXPECT_EQ(scalar.ndim, 0);
  int64_t off[1];
  scalar.offsets(0, off);
  EXPECT_EQ(off[0], 0);
}

TEST(StridedPlan, TooManyDimsAfterMergingIsNotSupported) {
  // Nine dims of size 2 whose strides alternate cannot merge.
  Shape sizes(9, 2), st(9);
  for (int d = 0; d < 9; ++d) st[d] = int64_t{1} << (2 * (8 - d));
  EXPECT_THROW(make_plan<1>(sizes, {st}, "test"), NotSupported);
  // The same dims contiguous merge into one.
  EXPECT_EQ(make_plan<1>(sizes, {contiguous_strides(sizes)}, "test").ndim, 1);
}

}  // namespace
}  // namespace cohort::cuda
