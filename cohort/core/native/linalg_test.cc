#include "cohort/core/native/linalg.h"

#include <gtest/gtest.h>

#include <thread>

#include "cohort/base/parallel.h"
#include "cohort/core/native/test_util.h"

namespace cohort::native {
namespace {

using testing::random_tensor;

TEST(Linalg, MmMatchesReferenceForAllLayouts) {
  Tensor a = random_tensor({37, 53}, 1), b = random_tensor({53, 29}, 2);
  Tensor want = mm_reference(a, b);
  EXPECT_TRUE(allclose(mm(a, b), want, 1e-4, 1e-4));
  Tensor at = a.transpose(0, 1).contiguous().transpose(0, 1);  // column-major view
  Tensor bt = b.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_TRUE(allclose(mm(at, bt), want, 1e-4, 1e-4));
  // A strided view that is neither layout forces a copy.
  Tensor wide = random_tensor({37, 106}, 3);
  Tensor odd = wide.as_strided({37, 53}, {106, 2}, 0);
  EXPECT_TRUE(allclose(mm(odd, b), mm_reference(odd, b), 1e-4, 1e-4));
  EXPECT_THROW(mm(a, a), InvalidArgument);
  Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64);
  EXPECT_TRUE(allclose(mm(a64, b64), mm_reference(a64, b64), 1e-12, 1e-12));
}

TEST(Linalg, SplitAcrossThreadsGivesTheSameResult) {
  Tensor a = random_tensor({256, 300}, 4), b = random_tensor({300, 200}, 5);
  Tensor one, four;
  {
    ThreadBudgetGuard g(1);
    one = mm(a, b);
  }
  {
    ThreadBudgetGuard g(4);
    four = mm(a, b);
  }
  EXPECT_TRUE(allclose(one, four, 1e-5, 1e-4)) << one << four;
  // Wide product splits along N.
  Tensor c = random_tensor({20, 500}, 6), d = random_tensor({500, 3000}, 7);
  ThreadBudgetGuard g(3);
  EXPECT_TRUE(allclose(mm(c, d), mm_reference(c, d), 1e-4, 1e-3));
}

TEST(Linalg, ConcurrentCallsFromThreads) {
  Tensor a = random_tensor({128, 128}, 8), b = random_tensor({128, 128}, 9);
  Tensor want = mm_reference(a, b);
  std::vector<std::thread> ts;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      ThreadBudgetGuard g(2);
      bool good = true;
      for (int i = 0; i < 5; ++i) good = good && allclose(mm(a, b), want, 1e-4, 1e-4);
      ok[t] = good;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Linalg, MatmulBroadcastsBatches) {
  Tensor a = random_tensor({2, 1, 3, 4}, 10), b = random_tensor({5, 4, 6}, 11);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.sizes(), (Shape{2, 5, 3, 6}));
  Tensor want = mm_reference(a.select(0, 1).select(0, 0), b.select(0, 3));
  EXPECT_TRUE(allclose(c.select(0, 1).select(0, 3), want, 1e-5, 1e-5));
  EXPECT_EQ(matmul(random_tensor({4}, 1), random_tensor({4, 3}, 2)).sizes(), (Shape{3}));
  EXPECT_EQ(matmul(random_tensor({2, 4}, 1), random_tensor({4}, 2)).sizes(), (Shape{2}));
  EXPECT_EQ(matmul(random_tensor({4}, 1), random_tensor({4}, 2)).dim(), 0);
  EXPECT_THROW(matmul(random_tensor({2, 3}, 1), random_tensor({4, 3}, 2)), InvalidArgument);
}

// Batched products (attention's q k^T and att v): with at least as many
// products as threads each is computed whole on one thread, so the result is
// the same bits on 1, 2 and 3 threads, and equals the reference per product,
// transposed views included.
TEST(Linalg, BatchedMatmulIsTheSameOnEveryThreadCount) {
  Tensor a = random_tensor({7, 33, 20}, 21), b = random_tensor({7, 45, 20}, 22);
  Tensor bt = b.transpose(1, 2);  // [7, 20, 45], a view
  Tensor one;
  {
    ThreadBudgetGuard g(1);
    one = matmul(a, bt);
  }
  for (int threads : {2, 3}) {
    ThreadBudgetGuard g(threads);
    Tensor many = matmul(a, bt);
    EXPECT_EQ(one.to_vector<float>(), many.to_vector<float>()) << threads << " threads";
  }
  for (int64_t i = 0; i < 7; ++i)
    EXPECT_TRUE(allclose(one.select(0, i),
                         mm_reference(a.select(0, i), bt.select(0, i).contiguous()), 1e-5, 1e-5))
        << "product " << i;
  // Fewer products than threads, each large: split one after the other.
  Tensor c = random_tensor({2, 130, 150}, 23), d = random_tensor({2, 150, 140}, 24);
  ThreadBudgetGuard g(3);
  Tensor cd = matmul(c, d);
  for (int64_t i = 0; i < 2; ++i)
    EXPECT_TRUE(
        allclose(cd.select(0, i), mm_reference(c.select(0, i), d.select(0, i)), 1e-4, 1e-4));
}

TEST(Linalg, LinearIsXWtPlusB) {
  Tensor x = random_tensor({2, 3, 5}, 12), w = random_tensor({4, 5}, 13),
         b = random_tensor({4}, 14);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4}));
  Tensor want = mm_reference(x.reshape({6, 5}), w.transpose(0, 1).contiguous());
  auto wv = want.to_vector<float>();
  auto bv = b.to_vector<float>();
  for (size_t i = 0; i < wv.size(); ++i) wv[i] += bv[i % 4];
  EXPECT_TRUE(allclose(y.reshape({6, 4}), Tensor::from_vector(wv, {6, 4}), 1e-5, 1e-5));
  EXPECT_TRUE(allclose(linear(x, w, Tensor()).reshape({6, 4}), want, 1e-5, 1e-5));
  EXPECT_THROW(linear(x, random_tensor({4, 6}, 1), b), InvalidArgument);
}

}  // namespace
}  // namespace cohort::native
