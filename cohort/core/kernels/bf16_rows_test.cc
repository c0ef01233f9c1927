// linear_gelu_tanh_bf16 (GELU in the bf16 GEMM's epilogue) and
// gelu_tanh_backward_through_linear_bf16 (GELU's backward in the epilogue of
// the GEMM that brings the gradient back) against the same steps run one
// after another: the same bits on every bf16 path, over shapes that take
// several passes over k, several row blocks and several column blocks, on one
// thread and on two; the column sums against a double reference.
#include "cohort/core/kernels/bf16_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/gelu.h"
#include "cohort/core/kernels/transformer_rows.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::kernels {
namespace {

Tensor randn(const Shape& s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> v(shape_numel(s));
  for (auto& x : v) x = n(g);
  return Tensor::from_vector(v, s);
}

struct Case {
  Shape lead;  // x's leading dims
  int64_t in, out;
  bool bias;
};

TEST(LinearGeluTanhBf16, GivesTheBitsOfLinearThenGelu) {
  const Case cases[] = {
      {{2, 7}, 40, 24, true},   // corner tiles only
      {{300}, 520, 70, false},  // three passes over k, two row blocks
      {{20}, 300, 600, true},   // split by columns on two threads
      {{13}, 8, 3100, true},    // two column blocks on one thread
  };
  for (native::Bf16Path path : native::supported_bf16_paths()) {
    for (int threads : {1, 2}) {
      ThreadBudgetGuard budget(threads);
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << native::bf16_path_name(path) << " threads " << threads
                                          << " in " << c.in << " out " << c.out);
        Shape xs = c.lead;
        xs.push_back(c.in);
        Tensor x16 = native::to_bf16(randn(xs, 1)), w16 = native::to_bf16(randn({c.out, c.in}, 2));
        Tensor b = c.bias ? randn({c.out}, 3) : Tensor();
        GeluBf16 got = linear_gelu_tanh_bf16(x16, w16, b, path);
        Tensor pre = native::linear_bf16(x16, w16, b, path).reshape({-1, c.out});
        Tensor out = gelu_tanh(pre);
        ASSERT_EQ(got.out.sizes(), pre.sizes());
        EXPECT_EQ(got.out.to_vector<float>(), out.to_vector<float>());
        EXPECT_EQ(got.pre16.to_vector<float>(), native::to_bf16(pre).to_vector<float>());
        EXPECT_EQ(got.out16.to_vector<float>(), native::to_bf16(out).to_vector<float>());
      }
    }
  }
}

TEST(LinearGeluTanhBf16, MismatchedShapesNameTheOp) {
  Tensor x16 = native::to_bf16(randn({4, 8}, 1)), w16 = native::to_bf16(randn({5, 9}, 2));
  try {
    linear_gelu_tanh_bf16(x16, w16, Tensor(), native::Bf16Path::kEmulated);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("linear_gelu_tanh_bf16: input [4, 8] does not match"),
              std::string::npos)
        << e.what();
  }
}

// Column sums of dh's rounding inputs in double: dh = g * gelu_tanh'(pre)
// from the float32 g, so the reference sums the unrounded float values.
std::vector<double> column_sums(const Tensor& g, const Tensor& pre16) {
  const int64_t rows = g.sizes()[0], n = g.sizes()[1];
  std::vector<float> gv = g.to_vector<float>(),
                     pv = native::bf16_to_float(pre16).to_vector<float>();
  std::vector<float> dh(static_cast<size_t>(n));
  std::vector<double> sums(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    detail::transformer_rows().gelu_tanh_backward(gv.data() + r * n, pv.data() + r * n, dh.data(),
                                                  nullptr, n);
    for (int64_t i = 0; i < n; ++i) sums[i] += dh[i];
  }
  return sums;
}

TEST(GeluTanhBackwardThroughLinearBf16, GivesTheBitsOfTheProductThenGeluBackward) {
  struct Shapes {
    int64_t rows, out, n;
  };
  const Shapes cases[] = {
      {7, 24, 40},     // corner tiles only
      {300, 520, 70},  // three passes over k, two row blocks
      {20, 300, 600},  // split by columns on two threads
      {13, 8, 3100},   // two column blocks on one thread
      {0, 8, 16},      // no rows: zero sums
  };
  for (native::Bf16Path path : native::supported_bf16_paths()) {
    for (int threads : {1, 2}) {
      ThreadBudgetGuard budget(threads);
      for (const Shapes& c : cases) {
        SCOPED_TRACE(::testing::Message()
                     << native::bf16_path_name(path) << " threads " << threads << " rows " << c.rows
                     << " out " << c.out << " n " << c.n);
        Tensor g16 = native::to_bf16(randn({c.rows, c.out}, 4));
        Tensor w16 = native::to_bf16(randn({c.out, c.n}, 5));
        Tensor pre16 = native::to_bf16(randn({c.rows, c.n}, 6));
        Bf16Rows got = gelu_tanh_backward_through_linear_bf16(g16, w16, pre16, true, path);
        Tensor g = native::mm_bf16(g16, w16, path);
        Bf16Rows want = gelu_tanh_backward_bf16(g, pre16, true);
        ASSERT_EQ(got.rounded.sizes(), want.rounded.sizes());
        EXPECT_EQ(got.rounded.to_vector<float>(), want.rounded.to_vector<float>());
        const std::vector<double> ref = column_sums(g, pre16);
        const std::vector<float> sums = got.sums.to_vector<float>();
        ASSERT_EQ(sums.size(), ref.size());
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(sums[i], ref[i], 1e-5 * (1.0 + std::abs(ref[i]))) << "column " << i;
        EXPECT_FALSE(
            gelu_tanh_backward_through_linear_bf16(g16, w16, pre16, false, path).sums.defined());
      }
    }
  }
}

TEST(GeluTanhBackwardThroughLinearBf16, MismatchedShapesNameTheOp) {
  Tensor g16 = native::to_bf16(randn({4, 8}, 1)), w16 = native::to_bf16(randn({8, 6}, 2));
  Tensor pre16 = native::to_bf16(randn({4, 7}, 3));
  try {
    gelu_tanh_backward_through_linear_bf16(g16, w16, pre16, true, native::Bf16Path::kEmulated);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("gelu_tanh_backward_through_linear_bf16: grad [4, 8], "
                                         "weight [8, 6] and pre16 [4, 7] do not match"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::kernels
