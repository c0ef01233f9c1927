#include "cohort/core/kernels/pool2d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"

namespace cohort::kernels {
namespace {

Pool2dGeometry geom(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p) {
  Pool2dGeometry g{n, c, h, w, k, k, s, s};
  g.pad_h = g.pad_w = p;
  return g;
}

std::vector<Pool2dGeometry> geometries() {
  std::vector<Pool2dGeometry> gs{
      geom(64, 20, 20, 20, 2, 2, 0),  // Net's pool
      geom(1, 1, 7, 7, 2, 2, 0),      // odd size drops the last row/column
      geom(2, 3, 9, 11, 3, 2, 1), geom(3, 1, 5, 5, 3, 1, 1), geom(1, 20, 13, 8, 1, 1, 0),
      geom(2, 3, 10, 10, 5, 3, 2), geom(1, 2, 6, 6, 4, 4, 2),
      // 2x2 planes whose rows end mid-vector
      geom(2, 3, 34, 34, 2, 2, 0), geom(1, 2, 5, 37, 2, 2, 0), geom(3, 1, 16, 16, 2, 2, 0),
      geom(2, 2, 9, 33, 2, 2, 0), geom(1, 1, 2, 2, 2, 2, 0), geom(1, 1, 3, 2, 2, 2, 0)};
  Pool2dGeometry r{2, 3, 9, 12, 2, 3, 2, 3};
  r.pad_w = 1;
  gs.push_back(r);
  return gs;
}

// Every test below runs once per kernel path the host can execute.
class Pool2dPaths : public testing::KernelPathTest {};
COHORT_INSTANTIATE_KERNEL_PATHS(Pool2dPaths);

TEST_P(Pool2dPaths, ForwardAndBackwardMatchReferenceForEveryBudget) {
  for (int budget : {1, 2, 3}) {
    ThreadBudgetGuard guard(budget);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (const auto& g : geometries()) {
      const int64_t xs = g.batch * g.channels * g.in_h * g.in_w;
      const int64_t ys = g.batch * g.channels * g.out_h() * g.out_w();
      std::vector<float> x(xs), dy(ys);
      // Quantised values make ties common, which exercises the tie rule.
      for (auto& v : x) v = std::round(d(rng) * 4.0f);
      for (auto& v : dy) v = d(rng);
      std::vector<float> y0(ys), y1(ys, 7.0f), dx0(xs), dx1(xs, 7.0f);
      std::vector<int32_t> a0(ys), a1(ys, -5);
      max_pool2d_forward_reference(g, x.data(), y0.data(), a0.data());
      max_pool2d_forward(g, x.data(), y1.data(), a1.data());
      EXPECT_EQ(y1, y0);
      EXPECT_EQ(a1, a0);
      max_pool2d_backward_reference(g, dy.data(), a0.data(), dx0.data());
      max_pool2d_backward(g, dy.data(), a0.data(), dx1.data());
      for (int64_t i = 0; i < xs; ++i) ASSERT_FLOAT_EQ(dx1[i], dx0[i]) << i << " budget " << budget;
    }
  }
}

TEST(Pool2d, ReferenceHandComputedWithTiesAndPadding) {
  // 3x3 plane, kernel 2, stride 1, padding 1 -> 4x4 outputs.
  Pool2dGeometry g = geom(1, 1, 3, 3, 2, 1, 1);
  std::vector<float> x{1, 5, 5, 2, 0, 3, 9, 9, -1};
  std::vector<float> y(16);
  std::vector<int32_t> a(16);
  max_pool2d_forward_reference(g, x.data(), y.data(), a.data());
  EXPECT_EQ(y, (std::vector<float>{1, 5, 5, 5, 2, 5, 5, 5, 9, 9, 9, 3, 9, 9, 9, -1}));
  // Ties keep the first element in window order: output (0,2) sees 5 at 1 and 2.
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 1, 2, 3, 1, 1, 2, 6, 6, 7, 5, 6, 6, 7, 8}));
}

TEST_P(Pool2dPaths, NanWins) {
  Pool2dGeometry g = geom(1, 1, 2, 2, 2, 2, 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x{1, nan, 7, 2}, y(1);
  std::vector<int32_t> a(1);
  max_pool2d_forward(g, x.data(), y.data(), a.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(a[0], 1);
  // The same in every lane of a vectorized row, NaN in each window position.
  Pool2dGeometry wide = geom(1, 1, 2, 40, 2, 2, 0);
  std::vector<float> xw(80, 1.0f), yw(20);
  std::vector<int32_t> aw(20);
  for (int o = 0; o < 20; ++o) xw[(o % 4 < 2 ? 0 : 40) + 2 * o + o % 2] = nan;
  max_pool2d_forward(wide, xw.data(), yw.data(), aw.data());
  for (int o = 0; o < 20; ++o) {
    EXPECT_TRUE(std::isnan(yw[o])) << o;
    EXPECT_EQ(aw[o], (o % 4 < 2 ? 0 : 40) + 2 * o + o % 2) << o;
  }
}

TEST_P(Pool2dPaths, BackwardAccumulatesOverlappingWindows) {
  Pool2dGeometry g = geom(1, 1, 1, 3, 1, 1, 0);
  g.kernel_w = 2;  // windows [0,1] and [1,2] both pick element 1
  std::vector<float> x{0, 9, 0}, y(2), dy{1.5f, 2.0f}, dx(3, 4.0f);
  std::vector<int32_t> a(2);
  max_pool2d_forward(g, x.data(), y.data(), a.data());
  max_pool2d_backward(g, dy.data(), a.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 3.5f, 0}));
}

TEST(Pool2d, RejectsBadGeometry) {
  std::vector<float> buf(64);
  std::vector<int32_t> a(64);
  EXPECT_THROW(max_pool2d_forward(geom(1, 1, 4, 4, 2, 0, 0), buf.data(), buf.data(), a.data()),
               InvalidArgument);
  EXPECT_THROW(max_pool2d_forward(geom(1, 1, 4, 4, 2, 2, 2), buf.data(), buf.data(), a.data()),
               InvalidArgument);
  EXPECT_THROW(max_pool2d_backward(geom(1, 1, 1, 1, 3, 1, 0), buf.data(), a.data(), buf.data()),
               InvalidArgument);
}

}  // namespace
}  // namespace cohort::kernels
