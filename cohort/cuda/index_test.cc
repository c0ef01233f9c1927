// Parity of native/index.h on cuda:0 with the CPU: embedding lookups and
// their backward (index_add with repeated rows), cat, tril / triu,
// masked_fill, and dropout, whose mask is drawn from the same Philox stream
// on both devices and so must match the CPU's bit for bit; plus the dropout
// statistics and the generator's advance.
#include "cohort/core/native/index.h"

#include "cohort/autograd/ops.h"
#include "cohort/cuda/pointwise_testing.h"

namespace cohort::cuda {
namespace {

using testing::gpu;
using testing::random_ints;
using testing::random_tensor;
using testing::same_values;

TEST(CudaIndex, IndexSelectEveryDimAndDtype) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({5, 6, 7}, 1);
  for (int64_t dim : {0, 1, 2}) {
    Tensor idx = random_ints({9}, 2 + dim, 0, x.sizes()[dim]);
    SCOPED_TRACE(dim);
    EXPECT_TRUE(same_values(native::index_select(x.to(gpu()), dim, idx.to(gpu())),
                            native::index_select(x, dim, idx), 0, 0));
  }
  // Rows long enough for the row-per-block kernel (embedding rows), with a
  // leading dim too.
  Tensor rows = random_tensor({3, 30, 300}, 40);
  Tensor ridx = random_ints({50}, 41, 0, 30);
  EXPECT_TRUE(same_values(native::index_select(rows.to(gpu()), 1, ridx.to(gpu())),
                          native::index_select(rows, 1, ridx), 0, 0));
  Tensor rsrc = random_tensor({3, 50, 300}, 42);
  EXPECT_TRUE(
      same_values(native::index_add({3, 30, 300}, kFloat32, 1, ridx.to(gpu()), rsrc.to(gpu())),
                  native::index_add({3, 30, 300}, kFloat32, 1, ridx, rsrc), 1e-5, 1e-5));
  Tensor idx32 = random_ints({4}, 5, 0, 5, kInt32);
  for (DType dt : {kFloat64, kInt64, kUInt8, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor xd = x.to(dt);
    EXPECT_TRUE(same_values(native::index_select(xd.to(gpu()), 0, idx32.to(gpu())),
                            native::index_select(xd, 0, idx32), 0, 0));
  }
}

TEST(CudaIndex, IndexAddSumsRepeatedRows) {
  COHORT_REQUIRE_CUDA();
  // 200 lookups into 10 rows: every row repeats. Float atomics add in no
  // fixed order: 1e-5 relative plus 1e-6 for sums near zero.
  Tensor idx = random_ints({200}, 6, 0, 10);
  Tensor src = random_tensor({200, 33}, 7);
  EXPECT_TRUE(same_values(native::index_add({10, 33}, kFloat32, 0, idx.to(gpu()), src.to(gpu())),
                          native::index_add({10, 33}, kFloat32, 0, idx, src), 1e-5, 1e-5));
  Tensor isrc = random_ints({3, 200, 2}, 8, -100, 100);
  EXPECT_TRUE(same_values(native::index_add({3, 10, 2}, kInt64, 1, idx.to(gpu()), isrc.to(gpu())),
                          native::index_add({3, 10, 2}, kInt64, 1, idx, isrc), 0, 0));
}

TEST(CudaIndex, GatherAndScatterAdd) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({4, 6, 5}, 20);
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    Shape is = {3, 4, 5};
    is[dim] = 7;  // more picks than x has along dim: repeats
    Tensor idx = random_ints(is, 21 + dim, 0, x.sizes()[dim]);
    EXPECT_TRUE(same_values(native::gather(x.to(gpu()), dim, idx.to(gpu())),
                            native::gather(x, dim, idx), 0, 0));
    // A strided x as well (a narrowed view: rows of 9 holding 5).
    Tensor big = random_tensor({4, 6, 9}, 30 + dim);
    EXPECT_TRUE(same_values(native::gather(big.to(gpu()).narrow(2, 1, 5), dim, idx.to(gpu())),
                            native::gather(big.narrow(2, 1, 5), dim, idx), 0, 0));
    Tensor src = random_tensor(is, 24 + dim);
    EXPECT_TRUE(
        same_values(native::scatter_add(x.sizes(), kFloat32, dim, idx.to(gpu()), src.to(gpu())),
                    native::scatter_add(x.sizes(), kFloat32, dim, idx, src), 1e-5, 1e-6));
  }
  // max over a dim with autograd: its backward is a scatter_add.
  Tensor h = x.clone().set_requires_grad(true);
  Tensor d = x.to(gpu()).set_requires_grad(true);
  cohort::sum(cohort::max(h, 1).first).backward();
  cohort::sum(cohort::max(d, 1).first).backward();
  EXPECT_TRUE(same_values(d.grad(), h.grad(), 0, 0));
}

TEST(CudaIndex, EmbeddingForwardAndBackward) {
  COHORT_REQUIRE_CUDA();
  Tensor w = random_tensor({50, 16}, 9);
  Tensor tokens = random_ints({4, 12}, 10, 0, 50);
  Tensor hw = w.clone().set_requires_grad(true);
  Tensor dw = w.to(gpu()).set_requires_grad(true);
  Tensor g = random_tensor({4, 12, 16}, 11);
  Tensor ho = cohort::embedding(hw, tokens);
  Tensor dout = cohort::embedding(dw, tokens.to(gpu()));
  EXPECT_TRUE(same_values(dout, ho, 0, 0));
  cohort::sum(cohort::mul(ho, g)).backward();
  cohort::sum(cohort::mul(dout, g.to(gpu()))).backward();
  EXPECT_TRUE(same_values(dw.grad(), hw.grad(), 1e-5, 1e-5));
}

TEST(CudaIndex, CatTriangleMaskedFill) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random_tensor({3, 4, 5}, 12);
  Tensor b = random_tensor({3, 2, 5}, 13);
  Tensor c = random_ints({3, 1, 5}, 14, -5, 5);  // promoted to float32
  EXPECT_TRUE(same_values(native::cat({a.to(gpu()), b.to(gpu()), c.to(gpu())}, 1),
                          native::cat({a, b, c}, 1), 0, 0));
  EXPECT_TRUE(
      same_values(native::cat({a.to(gpu()).transpose(0, 2), a.to(gpu()).transpose(0, 2)}, 0),
                  native::cat({a.transpose(0, 2), a.transpose(0, 2)}, 0), 0, 0));
  EXPECT_THROW(native::cat({a.to(gpu()), a}, 0), InvalidArgument);
  EXPECT_THROW(native::cat({a, a.to(gpu())}, 0), InvalidArgument);
  Tensor m = random_tensor({2, 6, 9}, 15);
  for (int64_t diag : {-2, 0, 3}) {
    for (bool lower : {true, false}) {
      SCOPED_TRACE(std::to_string(diag) + (lower ? " tril" : " triu"));
      EXPECT_TRUE(same_values(native::triangle(m.to(gpu()), diag, lower),
                              native::triangle(m, diag, lower), 0, 0));
    }
  }
  // The causal mask of attention: [T, T] ones -> tril -> == 0 -> fill -inf.
  Tensor scores = random_tensor({2, 3, 8, 8}, 16);
  Tensor causal = native::triangle(Tensor::ones({8, 8}, kUInt8), 0, true);
  Tensor hide = random_ints({8, 8}, 17, 0, 2, kInt64);
  for (const Tensor& mask : {causal, hide}) {
    EXPECT_TRUE(same_values(native::masked_fill(scores.to(gpu()), mask.to(gpu()), -1e9),
                            native::masked_fill(scores, mask, -1e9), 0, 0));
  }
}

TEST(CudaIndex, DropoutDrawsTheCpuMask) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({37, 101}, 18);  // not a multiple of 4 lanes
  for (double p : {0.0, 0.1, 0.5, 1.0}) {
    SCOPED_TRACE(p);
    Generator hg(1234), dg(1234);
    native::DropoutResult h = native::dropout(x, p, hg);
    native::DropoutResult d = native::dropout(x.to(gpu()), p, dg);
    EXPECT_TRUE(same_values(d.mask, h.mask, 0, 0));
    EXPECT_TRUE(same_values(d.out, h.out, 0, 0));
    // The generator advanced as far: the next draws agree too.
    EXPECT_EQ(hg.get_state(), dg.get_state());
  }
  Tensor x64 = random_tensor({999}, 19, kFloat64);
  Generator hg(7), dg(7);
  EXPECT_TRUE(same_values(native::dropout(x64.to(gpu()), 0.3, dg).mask,
                          native::dropout(x64, 0.3, hg).mask, 0, 0));
}

TEST(CudaIndex, DropoutStatistics) {
  COHORT_REQUIRE_CUDA();
  const double p = 0.25;
  Generator gen(99);
  Tensor x = Tensor::ones({1 << 20}, kFloat32, gpu());
  native::DropoutResult r = native::dropout(x, p, gen);
  std::vector<float> m = r.mask.to_vector<float>();
  std::vector<float> out = r.out.to_vector<float>();
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  int64_t kept = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    ASSERT_TRUE(m[i] == 0.0f || m[i] == scale) << i << ": " << m[i];
    ASSERT_EQ(out[i], m[i]) << i;  // x is 1: out = x * mask
    kept += m[i] != 0.0f;
  }
  // Binomial(2^20, 0.75): the standard deviation is 443 elements; allow 6.
  const double expect = 0.75 * static_cast<double>(m.size());
  EXPECT_NEAR(static_cast<double>(kept), expect, 6 * 443.0);
}

}  // namespace
}  // namespace cohort::cuda
