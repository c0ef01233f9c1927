// gemm_blocked.h's split by rows with stealing, on a plain scalar kernel: a
// thread held up in its first pass over k has its rows taken by the other,
// and still every element of C has the bits of one thread's run, each block's
// epilogue runs once, and a throwing thread ends the call without a hang.
#include "cohort/core/native/gemm_blocked.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"

namespace cohort::native::detail {
namespace {

// Panels: A's tile t at ap[t * mr * kc + p * mr + i], B's at bp[t * nr * kc +
// p * nr + j] (zero past the matrix). The first pack_a on `slow` (on any
// thread with throw_instead) throws, or waits (10 s at most) until another
// thread has packed a tile of slow's own share [0, slow_share_end) in the
// first pass: held up inside that pass.
struct ScalarKernels {
  static constexpr int mr = 3, nr = 4, kpack = 1;
  static inline std::thread::id slow;
  static inline std::atomic<int> slow_left{0};
  static inline bool throw_instead = false;
  static inline int64_t slow_share_end = 0;
  static inline std::atomic<bool> share_taken{false};
  // packer[tile] = the thread that packed that A tile in the first pass.
  static inline std::vector<std::thread::id>* first_pass_packer = nullptr;

  static void pack_a(bool ta, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                     int64_t kc, float* ap) {
    const bool on_slow = std::this_thread::get_id() == slow;
    if ((on_slow || throw_instead) && slow_left.fetch_sub(1) > 0) {
      if (throw_instead) throw std::runtime_error("pack_a failed on purpose");
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!share_taken && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (p0 == 0 && !on_slow && i0 / mr < slow_share_end) share_taken = true;
    if (p0 == 0 && first_pass_packer)
      for (int64_t t = i0 / mr; t < (i0 + mc + mr - 1) / mr; ++t)
        (*first_pass_packer)[t] = std::this_thread::get_id();
    for (int64_t t = 0; t * mr < mc; ++t)
      for (int64_t p = 0; p < kc; ++p)
        for (int i = 0; i < mr; ++i) {
          const int64_t r = i0 + t * mr + i, q = p0 + p;
          ap[(t * kc + p) * mr + i] =
              t * mr + i < mc ? (ta ? a[q * lda + r] : a[r * lda + q]) : 0.0f;
        }
  }
  static void pack_b(bool tb, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                     int64_t nc, float* bp) {
    for (int64_t t = 0; t * nr < nc; ++t)
      for (int64_t p = 0; p < kc; ++p)
        for (int j = 0; j < nr; ++j) {
          const int64_t col = j0 + t * nr + j, q = p0 + p;
          bp[(t * kc + p) * nr + j] =
              t * nr + j < nc ? (tb ? b[col * ldb + q] : b[q * ldb + col]) : 0.0f;
        }
  }
  static void micro(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int m,
                    int n, float alpha, float beta, bool first) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int64_t p = 0; p < kc; ++p) s += ap[p * mr + i] * bp[p * nr + j];
        float& out = c[i * ldc + j];
        out = (first ? (beta == 0.0f ? 0.0f : beta * out) : out) + alpha * s;
      }
  }
};

struct Problem {
  int64_t m = 301, n = 37, k = 600;  // three passes over k, 101 row tiles
  std::vector<float> a, b;
  Problem() {
    std::mt19937_64 g(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize(static_cast<size_t>(m * k));
    b.resize(static_cast<size_t>(k * n));
    for (float& x : a) x = u(g);
    for (float& x : b) x = u(g);
  }
  // C = A B (+ the blocks' epilogue counts in `covered`, when given).
  std::vector<float> run(std::vector<int>* covered = nullptr) const {
    std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
    BlockDone done;
    std::mutex mu;
    if (covered) {
      covered->assign(static_cast<size_t>(m * n), 0);
      done = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        std::lock_guard<std::mutex> lock(mu);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = c0; j < c1; ++j) ++(*covered)[r * n + j];
      };
    }
    blocked_gemm(ScalarKernels{}, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                 c.data(), n, nullptr, covered ? &done : nullptr);
    return c;
  }
};

TEST(BlockedGemmStealing, AHeldUpThreadsRowsAreTakenAndTheBitsStayTheSame) {
  const Problem pr;
  std::vector<float> one;
  {
    ThreadBudgetGuard budget(1);
    one = pr.run();
  }
  ThreadBudgetGuard budget(2);
  std::vector<std::thread::id> packer(static_cast<size_t>((pr.m + 2) / 3));
  ScalarKernels::first_pass_packer = &packer;
  ScalarKernels::slow = std::this_thread::get_id();  // the caller takes the first share
  ScalarKernels::slow_left = 1;
  ScalarKernels::throw_instead = false;
  ScalarKernels::slow_share_end = static_cast<int64_t>(packer.size()) / 2;
  ScalarKernels::share_taken = false;
  std::vector<int> covered;
  const std::vector<float> two = pr.run(&covered);
  ScalarKernels::first_pass_packer = nullptr;
  ScalarKernels::slow_left = 0;
  EXPECT_EQ(one, two);
  for (size_t i = 0; i < covered.size(); ++i)
    ASSERT_EQ(covered[i], 1) << "element " << i << ": epilogue calls";
  // The caller's share is the first half of the tiles; the other thread,
  // done with its own, took some of them while the caller slept.
  int taken = 0;
  for (size_t t = 0; t < packer.size() / 2; ++t) taken += packer[t] != ScalarKernels::slow;
  EXPECT_GT(taken, 0) << "no row of the held-up thread was taken";
}

// Whichever thread packs first throws (the caller may find every block
// taken before it starts, on a loaded host).
TEST(BlockedGemmStealing, AThrowingThreadEndsTheCallWithItsError) {
  const Problem pr;
  ThreadBudgetGuard budget(2);
  ScalarKernels::slow = std::thread::id();
  ScalarKernels::slow_left = 1;
  ScalarKernels::throw_instead = true;
  try {
    pr.run();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "pack_a failed on purpose");
  }
  ScalarKernels::throw_instead = false;
  ScalarKernels::slow_left = 0;
  // The pool is fine afterwards.
  ThreadBudgetGuard one(1);
  EXPECT_EQ(pr.run().size(), static_cast<size_t>(pr.m * pr.n));
}

}  // namespace
}  // namespace cohort::native::detail
