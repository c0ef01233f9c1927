// Parity of native/reduce.h on cuda:0 with the CPU: sum and mean over every
// kind of dim set (rows, leading columns, middle dims, all, keepdim), sum_to,
// max / min / argmax with ties and NaNs, and autograd through a small
// network's loss. Both devices accumulate sums in double: float32 results
// agree to 1e-5 relative for any length (1e-6 absolute for sums that cancel
// to near zero).
#include "cohort/core/native/reduce.h"

#include <limits>

#include "cohort/autograd/ops.h"
#include "cohort/cuda/pointwise_testing.h"

namespace cohort::cuda {
namespace {

using testing::gpu;
using testing::random_ints;
using testing::random_tensor;
using testing::same_values;

TEST(CudaReduce, SumAndMeanOverDims) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({6, 7, 300}, 1);
  Tensor d = x.to(gpu());
  const std::vector<Shape> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (const Shape& dims : dim_sets) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(shape_str(dims) + (keepdim ? " keepdim" : ""));
      EXPECT_TRUE(same_values(native::sum(d, dims, keepdim), native::sum(x, dims, keepdim)));
      EXPECT_TRUE(same_values(native::mean(d, dims, keepdim), native::mean(x, dims, keepdim)));
    }
  }
  // A strided input (reduced dims not innermost, not leading).
  EXPECT_TRUE(
      same_values(native::sum(d.transpose(0, 2), {1}), native::sum(x.transpose(0, 2), {1})));
}

TEST(CudaReduce, LongRowsAndColumnsSplitAcrossBlocks) {
  COHORT_REQUIRE_CUDA();
  // One long row (all elements), a few long rows, and a bias gradient shape.
  Tensor big = random_tensor({3, 400000}, 2);
  EXPECT_TRUE(same_values(native::sum(big.to(gpu())), native::sum(big), 1e-5, 1e-4));
  EXPECT_TRUE(same_values(native::sum(big.to(gpu()), {1}), native::sum(big, {1}), 1e-5, 1e-4));
  Tensor grad = random_tensor({16384, 77}, 3);
  EXPECT_TRUE(same_values(native::sum(grad.to(gpu()), {0}), native::sum(grad, {0}), 1e-5, 1e-4));
  EXPECT_TRUE(same_values(native::mean(grad.to(gpu()), {0}), native::mean(grad, {0})));
}

TEST(CudaReduce, IntegerAndOtherDtypes) {
  COHORT_REQUIRE_CUDA();
  Tensor i = random_ints({9, 1000}, 4, -1000000, 1000000, kInt32);
  EXPECT_TRUE(same_values(native::sum(i.to(gpu()), {1}), native::sum(i, {1}), 0, 0));
  EXPECT_TRUE(same_values(native::sum(i.to(gpu()), {0}), native::sum(i, {0}), 0, 0));
  Tensor u = random_ints({4, 50}, 5, 0, 256, kUInt8);
  EXPECT_TRUE(same_values(native::sum(u.to(gpu())), native::sum(u), 0, 0));
  Tensor f64 = random_tensor({5, 333}, 6, kFloat64);
  EXPECT_TRUE(same_values(native::sum(f64.to(gpu()), {1}), native::sum(f64, {1}), 1e-12, 1e-12));
  // bfloat16 sums in double and rounds once (the CPU has no bfloat16 math).
  Tensor b = random_tensor({8, 100}, 7, kBFloat16);
  EXPECT_TRUE(same_values(native::sum(b.to(gpu()), {1}),
                          native::sum(b.to(kFloat32), {1}).to(kBFloat16), 0, 0));
  EXPECT_THROW(native::mean(i.to(gpu())), InvalidArgument);
}

TEST(CudaReduce, SumToUndoesBroadcasting) {
  COHORT_REQUIRE_CUDA();
  Tensor g = random_tensor({4, 3, 5}, 8);
  for (const Shape& to : std::vector<Shape>{{5}, {3, 1}, {1, 5}, {4, 1, 5}, {4, 3, 5}, {1}}) {
    SCOPED_TRACE(shape_str(to));
    EXPECT_TRUE(same_values(native::sum_to(g.to(gpu()), to), native::sum_to(g, to)));
  }
}

TEST(CudaReduce, MaxMinArgmaxWithTiesAndNaN) {
  COHORT_REQUIRE_CUDA();
  // Few distinct values: ties, whose first index must win.
  Tensor x = random_ints({5, 6, 7}, 9, -2, 3).to(kFloat32);
  Tensor d = x.to(gpu());
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(std::to_string(dim) + (keepdim ? " keepdim" : ""));
      auto [hv, hi] = native::max(x, dim, keepdim);
      auto [dv, di] = native::max(d, dim, keepdim);
      EXPECT_TRUE(same_values(dv, hv, 0, 0));
      EXPECT_TRUE(same_values(di, hi, 0, 0));
      auto [hv2, hi2] = native::min(x, dim, keepdim);
      auto [dv2, di2] = native::min(d, dim, keepdim);
      EXPECT_TRUE(same_values(dv2, hv2, 0, 0));
      EXPECT_TRUE(same_values(di2, hi2, 0, 0));
      EXPECT_TRUE(
          same_values(native::argmax(d, dim, keepdim), native::argmax(x, dim, keepdim), 0, 0));
    }
  }
  EXPECT_TRUE(same_values(native::max_all(d), native::max_all(x), 0, 0));
  EXPECT_TRUE(same_values(native::min_all(d), native::min_all(x), 0, 0));
  // A NaN is the max (and the min), its first occurrence the index.
  Tensor n = random_tensor({3, 2000}, 10);
  std::vector<float> v = n.to_vector<float>();
  v[1500] = v[1700] = std::numeric_limits<float>::quiet_NaN();
  v[2000 + 10] = std::numeric_limits<float>::quiet_NaN();
  n = Tensor::from_vector(v, {3, 2000});
  auto [nv, ni] = native::max(n.to(gpu()), 1);
  EXPECT_TRUE(same_values(ni, native::max(n, 1).second, 0, 0));
  EXPECT_TRUE(same_values(nv, native::max(n, 1).first, 0, 0));
  EXPECT_TRUE(same_values(native::min(n.to(gpu()), 1).second, native::min(n, 1).second, 0, 0));
  // Integers, and a long row.
  Tensor i = random_ints({4, 100000}, 11, -1000000, 1000000);
  EXPECT_TRUE(same_values(native::argmax(i.to(gpu()), 1), native::argmax(i, 1), 0, 0));
}

TEST(CudaReduce, AutogradThroughALayerAndItsLoss) {
  COHORT_REQUIRE_CUDA();
  // loss = mean(relu(x * w + b)) + sum(tanh(x) * 0.1): gradients reach w and b
  // through broadcasting (sum_to), the reductions and the pointwise gradients.
  Tensor x = random_tensor({32, 20}, 12);
  Tensor w = random_tensor({20}, 13);
  Tensor b = random_tensor({1, 20}, 14);
  auto loss_of = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor h = cohort::relu(cohort::add(cohort::mul(x, w), b));
    return cohort::add(cohort::mean(h), cohort::sum(cohort::mul(cohort::tanh(x), 0.1)));
  };
  Tensor hw = w.clone().set_requires_grad(true), hb = b.clone().set_requires_grad(true);
  Tensor dw = w.to(gpu()).set_requires_grad(true), db = b.to(gpu()).set_requires_grad(true);
  Tensor hl = loss_of(x, hw, hb);
  Tensor dl = loss_of(x.to(gpu()), dw, db);
  EXPECT_TRUE(same_values(dl, hl));
  hl.backward();
  dl.backward();
  EXPECT_TRUE(same_values(dw.grad(), hw.grad()));
  EXPECT_TRUE(same_values(db.grad(), hb.grad()));
}

}  // namespace
}  // namespace cohort::cuda
