#include "cohort/core/kernels/conv2d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"

namespace cohort::kernels {
namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

std::string name(const Conv2dGeometry& g) {
  return fmt::format("N{} C{} {}x{} OC{} k{}x{} s{}x{} p{}x{}", g.batch, g.in_channels, g.in_h,
                     g.in_w, g.out_channels, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w,
                     g.pad_h, g.pad_w);
}

// Tolerance scaled by the reduction length: fp32 sums of `terms` products of
// values in [-1, 1].
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t terms,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const float tol = 1e-5f * std::sqrt(static_cast<float>(terms)) * 4.0f + 1e-6f;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << what << " at " << i;
  }
}

std::vector<Conv2dGeometry> geometries() {
  std::vector<Conv2dGeometry> gs;
  auto add = [&](int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                 int64_t s, int64_t p) {
    Conv2dGeometry g{n, c, h, w, oc, kh, kw};
    g.stride_h = g.stride_w = s;
    g.pad_h = g.pad_w = p;
    gs.push_back(g);
  };
  add(4, 1, 28, 28, 20, 5, 5, 1, 0);   // Net conv1
  add(3, 20, 24, 24, 20, 5, 5, 1, 0);  // Net conv2
  add(1, 1, 7, 9, 1, 3, 3, 1, 0);
  add(1, 3, 11, 13, 5, 3, 3, 1, 1);
  add(2, 3, 15, 10, 7, 5, 5, 2, 2);
  add(2, 20, 9, 9, 20, 1, 1, 1, 0);
  add(3, 20, 13, 17, 20, 3, 3, 2, 1);
  add(1, 3, 5, 5, 4, 5, 5, 1, 0);  // output 1x1
  add(2, 1, 12, 19, 3, 5, 5, 2, 0);
  add(5, 20, 10, 10, 33, 3, 3, 1, 1);  // out_channels not a multiple of anything
  add(2, 2, 6, 6, 3, 1, 1, 2, 0);      // 1x1 stride 2
  add(1, 20, 31, 29, 20, 5, 5, 1, 2);
  add(2, 3, 8, 8, 17, 3, 3, 3, 1);
  // Batches of 8 and more take the batch-16 direct path; 17 and 33 leave a
  // partly filled last group.
  add(16, 1, 28, 28, 20, 5, 5, 1, 0);  // Net conv1, one full group
  add(8, 20, 16, 16, 20, 5, 5, 1, 0);  // Net conv2's channels
  add(17, 20, 12, 12, 20, 5, 5, 1, 0);
  add(8, 3, 11, 13, 5, 3, 3, 1, 1);
  add(33, 3, 15, 10, 7, 5, 5, 2, 2);
  add(9, 20, 9, 9, 20, 1, 1, 1, 0);
  add(17, 20, 13, 17, 13, 3, 3, 2, 1);
  add(10, 1, 12, 19, 3, 5, 5, 2, 0);
  add(12, 6, 10, 10, 33, 3, 3, 1, 1);
  add(8, 2, 6, 6, 3, 1, 1, 2, 0);
  add(9, 12, 13, 11, 10, 5, 5, 1, 2);  // Winograd with partial 4x4 blocks and padding
  add(16, 8, 9, 9, 12, 5, 5, 1, 4);    // Winograd, padding = kernel - 1
  add(130, 8, 8, 8, 8, 5, 5, 1, 0);    // 9 groups: whole groups per task, uneven
  add(130, 3, 9, 9, 4, 3, 3, 1, 1);    // the same on the direct path
  add(16, 1, 12, 12, 64, 5, 5, 1, 0);  // one input channel, Winograd by a hair
  add(8, 4, 31, 29, 2, 5, 5, 1, 2);
  add(8, 2, 6, 6, 4, 7, 7, 1, 4);          // padding > kernel/2
  add(8, 3, 9, 11, 8, 8, 8, 1, 0);         // kernel wider than one weight tile
  Conv2dGeometry r{2, 3, 9, 14, 6, 3, 5};  // non-square kernel, mixed stride/pad
  r.stride_h = 2;
  r.pad_w = 2;
  gs.push_back(r);
  r.batch = 11;
  gs.push_back(r);
  return gs;
}

struct Buffers {
  std::vector<float> x, w, b, dy;
};

Buffers make(const Conv2dGeometry& g, uint32_t seed) {
  return {random_vec(g.batch * g.in_channels * g.in_h * g.in_w, seed),
          random_vec(g.out_channels * g.in_channels * g.kernel_h * g.kernel_w, seed + 1),
          random_vec(g.out_channels, seed + 2),
          random_vec(g.batch * g.out_channels * g.out_h() * g.out_w(), seed + 3)};
}

// Every test below runs once per kernel path (baseline, avx2, avx512) the
// host can execute.
class Conv2dPaths : public testing::KernelPathTest {};
COHORT_INSTANTIATE_KERNEL_PATHS(Conv2dPaths);

// Thread budgets the fast paths are checked under (each splits work
// differently); the reference is computed once per geometry.
constexpr int kBudgets[] = {1, 2, 3};

TEST_P(Conv2dPaths, ForwardMatchesReference) {
  uint32_t seed = 1;
  for (const auto& g : geometries()) {
    Buffers d = make(g, seed += 10);
    const int64_t ysize = g.batch * g.out_channels * g.out_h() * g.out_w();
    const int64_t plane = g.out_h() * g.out_w();
    const int64_t terms = g.in_channels * g.kernel_h * g.kernel_w;
    std::vector<float> want(ysize), want_nobias(ysize), want_relu(ysize), got(ysize);
    conv2d_forward_reference(g, d.x.data(), d.w.data(), d.b.data(), want.data());
    for (int64_t i = 0; i < ysize; ++i) {
      want_nobias[i] = want[i] - d.b[(i / plane) % g.out_channels];
      want_relu[i] = std::max(want[i], 0.0f);
    }
    for (int t : kBudgets) {
      ThreadBudgetGuard guard(t);
      const std::string what = name(g) + " threads " + std::to_string(t);
      std::fill(got.begin(), got.end(), 123.0f);
      conv2d_forward(g, d.x.data(), d.w.data(), d.b.data(), got.data());
      expect_close(got, want, terms, "forward " + what);
      std::fill(got.begin(), got.end(), 123.0f);
      conv2d_forward(g, d.x.data(), d.w.data(), nullptr, got.data());
      expect_close(got, want_nobias, terms, "forward no bias " + what);
      std::fill(got.begin(), got.end(), 123.0f);
      conv2d_forward_relu(g, d.x.data(), d.w.data(), d.b.data(), got.data());
      expect_close(got, want_relu, terms, "forward relu " + what);
    }
  }
}

TEST_P(Conv2dPaths, BackwardInputMatchesReference) {
  uint32_t seed = 2;
  for (const auto& g : geometries()) {
    Buffers d = make(g, seed += 10);
    const int64_t xsize = g.batch * g.in_channels * g.in_h * g.in_w;
    std::vector<float> want(xsize), got(xsize);
    conv2d_backward_input_reference(g, d.dy.data(), d.w.data(), want.data());
    for (int t : kBudgets) {
      ThreadBudgetGuard guard(t);
      std::fill(got.begin(), got.end(), 123.0f);
      conv2d_backward_input(g, d.dy.data(), d.w.data(), got.data());
      expect_close(got, want, g.out_channels * g.kernel_h * g.kernel_w,
                   "backward_input " + name(g) + " threads " + std::to_string(t));
    }
  }
}

TEST_P(Conv2dPaths, BackwardWeightMatchesReference) {
  uint32_t seed = 3;
  for (const auto& g : geometries()) {
    Buffers d = make(g, seed += 10);
    const int64_t wsize = g.out_channels * g.in_channels * g.kernel_h * g.kernel_w;
    const int64_t terms = g.batch * g.out_h() * g.out_w();
    std::vector<float> want(wsize), got(wsize), wantb(g.out_channels), gotb(g.out_channels);
    conv2d_backward_weight_reference(g, d.x.data(), d.dy.data(), want.data(), wantb.data());
    for (int t : kBudgets) {
      ThreadBudgetGuard guard(t);
      const std::string what = name(g) + " threads " + std::to_string(t);
      std::fill(got.begin(), got.end(), 123.0f);
      std::fill(gotb.begin(), gotb.end(), 123.0f);
      conv2d_backward_weight(g, d.x.data(), d.dy.data(), got.data(), gotb.data());
      expect_close(got, want, terms, "backward_weight " + what);
      expect_close(gotb, wantb, terms, "backward_bias " + what);
      std::fill(got.begin(), got.end(), 123.0f);
      conv2d_backward_weight(g, d.x.data(), d.dy.data(), got.data(), nullptr);
      expect_close(got, want, terms, "backward_weight no bias " + what);
    }
  }
}

TEST_P(Conv2dPaths, CombinedBackwardWithReluMatchesReference) {
  // conv2d_backward with y_relu: dy is masked by y_relu > 0 on the fly.
  uint32_t seed = 4;
  for (const auto& g : geometries()) {
    Buffers d = make(g, seed += 10);
    std::vector<float> mask = random_vec(d.dy.size(), seed + 5), masked(d.dy.size());
    for (size_t i = 0; i < mask.size(); ++i) masked[i] = mask[i] <= 0.0f ? 0.0f : d.dy[i];
    const int64_t xsize = g.batch * g.in_channels * g.in_h * g.in_w;
    const int64_t wsize = g.out_channels * g.in_channels * g.kernel_h * g.kernel_w;
    std::vector<float> want_dx(xsize), want_dw(wsize), want_db(g.out_channels);
    conv2d_backward_input_reference(g, masked.data(), d.w.data(), want_dx.data());
    conv2d_backward_weight_reference(g, d.x.data(), masked.data(), want_dw.data(), want_db.data());
    const int64_t terms_x = g.out_channels * g.kernel_h * g.kernel_w;
    const int64_t terms_w = g.batch * g.out_h() * g.out_w();
    for (int t : kBudgets) {
      ThreadBudgetGuard guard(t);
      const std::string what = name(g) + " threads " + std::to_string(t);
      std::vector<float> dx(xsize, 123.0f), dw(wsize, 123.0f), db(g.out_channels, 123.0f);
      conv2d_backward(g, d.x.data(), d.w.data(), d.dy.data(), mask.data(), dx.data(), dw.data(),
                      db.data());
      expect_close(dx, want_dx, terms_x, "combined dx " + what);
      expect_close(dw, want_dw, terms_w, "combined dw " + what);
      expect_close(db, want_db, terms_w, "combined db " + what);
      // Each output is optional.
      std::fill(dx.begin(), dx.end(), 123.0f);
      conv2d_backward(g, d.x.data(), d.w.data(), d.dy.data(), mask.data(), dx.data(), nullptr,
                      nullptr);
      expect_close(dx, want_dx, terms_x, "combined dx only " + what);
      std::fill(db.begin(), db.end(), 123.0f);
      conv2d_backward(g, d.x.data(), d.w.data(), d.dy.data(), mask.data(), nullptr, nullptr,
                      db.data());
      expect_close(db, want_db, terms_w, "combined db only " + what);
    }
  }
}

TEST_P(Conv2dPaths, CombinedBackwardWithoutReluMatchesSeparateCalls) {
  Conv2dGeometry g{32, 20, 12, 12, 20, 5, 5};  // Winograd, two groups
  Buffers d = make(g, 99);
  const int64_t xsize = g.batch * g.in_channels * g.in_h * g.in_w;
  const int64_t wsize = g.out_channels * g.in_channels * 25;
  std::vector<float> dx(xsize), dw(wsize), db(20), dx2(xsize), dw2(wsize), db2(20);
  for (int t : kBudgets) {
    ThreadBudgetGuard guard(t);
    conv2d_backward_input(g, d.dy.data(), d.w.data(), dx.data());
    conv2d_backward_weight(g, d.x.data(), d.dy.data(), dw.data(), db.data());
    conv2d_backward(g, d.x.data(), d.w.data(), d.dy.data(), nullptr, dx2.data(), dw2.data(),
                    db2.data());
    EXPECT_EQ(dx2, dx) << t;
    expect_close(dw2, dw, 1, "dw threads " + std::to_string(t));
    expect_close(db2, db, 1, "db threads " + std::to_string(t));
  }
}

TEST_P(Conv2dPaths, ReferenceMatchesHandComputedValue) {
  // x = 1..9 in a 3x3 plane, 2x2 kernel of ones, bias 0.5: each output is the
  // sum of a 2x2 window plus 0.5.
  Conv2dGeometry g{1, 1, 3, 3, 1, 2, 2};
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9}, w{1, 1, 1, 1}, b{0.5f}, y(4);
  conv2d_forward_reference(g, x.data(), w.data(), b.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{12.5f, 16.5f, 24.5f, 28.5f}));
  conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{12.5f, 16.5f, 24.5f, 28.5f}));
}

TEST_P(Conv2dPaths, ConcurrentCallersAgree) {
  // DataParallel replicas call the kernels from several threads at once, each
  // with its own budget; per-thread scratch must not be shared. Covers the
  // Winograd (5x5) and direct (3x3) batch-16 paths and the im2col path.
  Conv2dGeometry big{17, 20, 12, 12, 20, 5, 5}, small{3, 3, 9, 9, 4, 3, 3};
  Conv2dGeometry direct{20, 6, 10, 10, 8, 3, 3};
  ThreadBudgetGuard main_budget(2);
  for (const Conv2dGeometry& g : {big, direct, small}) {
    Buffers d = make(g, 77);
    const int64_t ysize = g.batch * g.out_channels * g.out_h() * g.out_w();
    const int64_t xsize = g.batch * g.in_channels * g.in_h * g.in_w;
    const int64_t wsize = g.out_channels * g.in_channels * g.kernel_h * g.kernel_w;
    std::vector<float> y(ysize), dx(xsize), dw(wsize), db(g.out_channels);
    conv2d_forward(g, d.x.data(), d.w.data(), d.b.data(), y.data());
    conv2d_backward_input(g, d.dy.data(), d.w.data(), dx.data());
    conv2d_backward_weight(g, d.x.data(), d.dy.data(), dw.data(), db.data());
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        ThreadBudgetGuard guard(1 + t % 2);
        std::vector<float> y2(ysize), dx2(xsize), dw2(wsize), db2(g.out_channels);
        bool same = true;
        for (int rep = 0; rep < 3; ++rep) {
          conv2d_forward(g, d.x.data(), d.w.data(), d.b.data(), y2.data());
          conv2d_backward_input(g, d.dy.data(), d.w.data(), dx2.data());
          conv2d_backward_weight(g, d.x.data(), d.dy.data(), dw2.data(), db2.data());
          same = same && y2 == y && dx2 == dx;
          // Weight sums split by the budget: only budget 2 must match bit for bit.
          if (t % 2 == 1) same = same && dw2 == dw && db2 == db;
        }
        ok[t] = same;
      });
    for (auto& t : threads) t.join();
    for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << name(g) << " caller " << t;
  }
}

TEST(Conv2d, RejectsBadGeometry) {
  std::vector<float> buf(1024);
  Conv2dGeometry g{1, 1, 3, 3, 1, 5, 5};  // kernel larger than input
  EXPECT_THROW(conv2d_forward(g, buf.data(), buf.data(), nullptr, buf.data()), InvalidArgument);
  Conv2dGeometry z{0, 1, 3, 3, 1, 1, 1};
  EXPECT_THROW(conv2d_backward_input(z, buf.data(), buf.data(), buf.data()), InvalidArgument);
  Conv2dGeometry s{1, 1, 3, 3, 1, 1, 1};
  s.stride_h = 0;
  EXPECT_THROW(conv2d_backward_weight(s, buf.data(), buf.data(), buf.data(), nullptr),
               InvalidArgument);
}

}  // namespace
}  // namespace cohort::kernels
