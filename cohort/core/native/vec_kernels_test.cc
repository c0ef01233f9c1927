// The vector loops of every kernel path (vec_kernels.h), through the ops that
// use them, against the same ops on the baseline path (the generic loops of
// elementwise.cc and reduce.cc): odd lengths, NaN, inf and -0 on either
// side, scalar operands, and lengths split over threads. Each test runs once
// per path (Paths/VecKernels.*/baseline|avx2|avx512); paths this CPU cannot
// run are reported as skipped.
#include "cohort/core/native/vec_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/reduce.h"

namespace cohort::native {
namespace {

class VecKernels : public cohort::testing::KernelPathTest {};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
const int64_t kLengths[] = {0, 1, 7, 15, 17, 31, 33, 1000, 70001};

// Random values in [-4, 4] with NaN, inf, -inf, 0 and -0 placed by `seed`, so
// that two operands have their special values in different places (and, for
// small n, sometimes in the same one).
Tensor values(int64_t n, uint64_t seed, bool special = true) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  const float odd[] = {kNaN, kInf, -kInf, 0.0f, -0.0f};
  for (size_t k = 0; k < std::size(odd) && n > 0 && special; ++k)
    v[(seed * 7 + k * 3) % static_cast<uint64_t>(n)] = odd[k];
  return Tensor::from_vector(v, {n});
}

// The same op on the baseline path.
Tensor on_baseline(const std::function<Tensor()>& op) {
  KernelPathGuard baseline(KernelPath::kBaseline);
  return op();
}

// Bit for bit, a NaN matching any NaN (operand order may pick either payload).
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " [" << i << "] = " << g[i];
      continue;
    }
    ASSERT_EQ(std::memcmp(&g[i], &w[i], sizeof(float)), 0)
        << what << " [" << i << "] = " << g[i] << ", reference " << w[i];
  }
}

TEST_P(VecKernels, BinaryOpsMatchReference) {
  const std::pair<BinaryOp, const char*> ops[] = {
      {BinaryOp::kAdd, "add"}, {BinaryOp::kSub, "sub"},         {BinaryOp::kMul, "mul"},
      {BinaryOp::kDiv, "div"}, {BinaryOp::kMaximum, "maximum"}, {BinaryOp::kMinimum, "minimum"}};
  for (int64_t n : kLengths) {
    const Tensor a = values(n, 1), b = values(n, 2);
    for (auto [op, name] : ops) {
      const std::string what = std::string(name) + " n=" + std::to_string(n);
      expect_same(binary(op, a, b), on_baseline([&] { return binary(op, a, b); }), what);
      for (float s : {1.5f, -0.0f, kNaN, kInf}) {
        const Tensor t = Tensor::scalar(s);
        expect_same(binary(op, a, t), on_baseline([&] { return binary(op, a, t); }),
                    what + " scalar rhs " + std::to_string(s));
        expect_same(binary(op, t, a), on_baseline([&] { return binary(op, t, a); }),
                    what + " scalar lhs " + std::to_string(s));
      }
    }
  }
  // Strided and broadcast operands still take the generic loops.
  const Tensor m = values(6 * 7, 3).reshape({6, 7}), row = values(7, 4).reshape({1, 7});
  expect_same(binary(BinaryOp::kAdd, m.transpose(0, 1), m.transpose(0, 1)), on_baseline([&] {
                return binary(BinaryOp::kAdd, m.transpose(0, 1), m.transpose(0, 1));
              }),
              "strided add");
  expect_same(binary(BinaryOp::kMul, m, row),
              on_baseline([&] { return binary(BinaryOp::kMul, m, row); }), "broadcast mul");
}

TEST_P(VecKernels, UnaryOpsMatchReference) {
  const std::pair<UnaryOp, const char*> ops[] = {
      {UnaryOp::kNeg, "neg"}, {UnaryOp::kAbs, "abs"}, {UnaryOp::kRelu, "relu"}};
  for (int64_t n : kLengths) {
    const Tensor x = values(n, 5);
    for (auto [op, name] : ops)
      expect_same(unary(op, x), on_baseline([&] { return unary(op, x); }),
                  std::string(name) + " n=" + std::to_string(n));
  }
}

TEST_P(VecKernels, ReluBackwardMatchesReference) {
  for (int64_t n : kLengths) {
    const Tensor g = values(n, 6), y = values(n, 7);
    expect_same(relu_backward(g, y), on_baseline([&] { return relu_backward(g, y); }),
                "relu_backward n=" + std::to_string(n));
  }
}

// Within an ulp of float, the same NaN and inf.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]))
      EXPECT_TRUE(std::isnan(g[i])) << what << " [" << i << "]";
    else if (std::isinf(w[i]))
      EXPECT_EQ(g[i], w[i]) << what << " [" << i << "]";
    else
      EXPECT_NEAR(g[i], w[i], 1.2e-7 * std::abs(w[i]) + 1e-30) << what << " [" << i << "]";
  }
}

// Row sums add in another order than the baseline (double accumulators):
// equal after rounding to float but for double-rounding ties, so within an
// ulp; NaN and inf propagate as in the reference.
TEST_P(VecKernels, RowSumsMatchReference) {
  for (int64_t n : kLengths) {
    for (bool special : {false, true}) {
      const Tensor x = values(3 * n, 8, special).reshape({3, n});
      for (const Shape& dims : {Shape{1}, Shape{}}) {
        const Tensor got = sum(x, dims), want = on_baseline([&] { return sum(x, dims); });
        const Tensor got_mean = mean(x, dims),
                     want_mean = on_baseline([&] { return mean(x, dims); });
        expect_close(got, want, "sum n=" + std::to_string(n));
        expect_close(got_mean, want_mean, "mean n=" + std::to_string(n));
      }
    }
  }
}

// Column sums (a linear layer's bias gradient) add each column in row order
// on every path: the same bits as the reference.
TEST_P(VecKernels, ColumnSumsMatchReferenceBitForBit) {
  for (int64_t n : kLengths) {
    if (n > 1000) continue;
    const Tensor x = values(64 * n, 9).reshape({64, n});
    expect_same(sum(x, {0}), on_baseline([&] { return sum(x, {0}); }),
                "column sums n=" + std::to_string(n));
  }
  ThreadBudgetGuard threads(4);
  const Tensor big = values(300 * 500, 10).reshape({300, 500});
  expect_same(sum(big, {0}), on_baseline([&] { return sum(big, {0}); }), "column sums 300x500");
}

// A long row is summed in fixed blocks: one value whatever the thread count,
// on every path.
TEST_P(VecKernels, LongRowSumIsTheSameForEveryThreadCount) {
  const Tensor x = values(200001, 11, false);
  Tensor one, four;
  {
    ThreadBudgetGuard t(1);
    one = sum(x);
  }
  {
    ThreadBudgetGuard t(4);
    four = sum(x);
  }
  EXPECT_TRUE(equal(one, four));
  EXPECT_TRUE(allclose(one, sum_reference(x, {}, false), 1e-6, 1e-4));
}

COHORT_INSTANTIATE_KERNEL_PATHS(VecKernels);

}  // namespace
}  // namespace cohort::native
