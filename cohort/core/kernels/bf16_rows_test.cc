// linear_gelu_tanh_bf16 (GELU in the bf16 GEMM's epilogue) against the same
// steps run one after another: the same bits on every bf16 path, over
// shapes that take several passes over k, several row blocks and several
// column blocks, on one thread and on two.
#include "cohort/core/kernels/bf16_rows.h"

#include <gtest/gtest.h>

#include <random>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/gelu.h"
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

}  // namespace
}  // namespace cohort::kernels
