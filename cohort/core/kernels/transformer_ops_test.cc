// The fused transformer kernels (gelu.h, layer_norm.h via native::layer_norm
// and native::add_layer_norm, cross_entropy.h) on every kernel path, in
// float32, against the same computation composed from the unfused kernels in
// float64: row counts that do not fill a GEMM block or a thread's part,
// widths off the vector width, ignored rows and every reduction.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "cohort/base/kernel_path_testing.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/cross_entropy.h"
#include "cohort/core/kernels/gelu.h"
#include "cohort/core/kernels/transformer_rows.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/loss.h"
#include "cohort/core/native/norm.h"
#include "cohort/core/native/reduce.h"
#include "cohort/core/native/softmax.h"
#include "cohort/core/native/test_util.h"

namespace cohort::kernels {
namespace {

using cohort::testing::random_tensor;

class TransformerOps : public cohort::testing::KernelPathTest {};

Tensor f64(const Tensor& t) { return t.to(kFloat64); }

// gelu_tanh in float64 through the reference formula.
Tensor gelu_ref(const Tensor& x) { return gelu_tanh(f64(x)); }

void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(allclose(f64(got), f64(want), rtol, atol))
      << what << ": max |diff| "
      << native::max_all(native::unary(native::UnaryOp::kAbs,
                                       native::binary(native::BinaryOp::kSub, f64(got), f64(want))))
             .item<double>();
}

TEST_P(TransformerOps, LinearGeluMatchesComposed) {
  // (rows, in, out): one partial block; several blocks and parts; 3-D input.
  const std::array<int64_t, 3> shapes[] = {{1, 5, 3}, {37, 50, 70}, {600, 24, 40}, {130, 17, 300}};
  for (int threads : {1, 3})
    for (auto [rows, in, out] : shapes) {
      ThreadBudgetGuard budget(threads);
      const std::string what = "rows " + std::to_string(rows) + " in " + std::to_string(in) +
                               " out " + std::to_string(out) + " threads " +
                               std::to_string(threads);
      Tensor x = random_tensor({rows, in}, 1), w = random_tensor({out, in}, 2, kFloat32, -0.5, 0.5),
             b = random_tensor({out}, 3);
      Tensor pre_ref = native::linear(f64(x), f64(w), f64(b));
      for (bool bias : {true, false}) {
        LinearGeluResult r = linear_gelu(x, w, bias ? b : Tensor());
        Tensor want_pre = bias ? pre_ref : native::linear(f64(x), f64(w), Tensor());
        expect_close(r.pre, want_pre, 1e-5, 1e-5, "pre " + what);
        expect_close(r.out, gelu_ref(want_pre), 1e-5, 1e-5, "out " + what);
      }
      // Backward against d pre = g gelu'(pre) and the linear layer's rules.
      LinearGeluResult r = linear_gelu(x, w, b);
      Tensor g = random_tensor({rows, out}, 4);
      LinearGeluGrads gr = linear_gelu_backward(g, x, w, r.pre, true, true, true);
      Tensor dh = gelu_tanh_backward(f64(g), f64(r.pre));
      expect_close(gr.dx, native::mm(dh, f64(w)), 1e-4, 1e-4, "dx " + what);
      expect_close(gr.dw, native::mm(dh.transpose(0, 1), f64(x)), 1e-4, 1e-4, "dw " + what);
      expect_close(gr.db, native::sum(dh, {0}), 1e-4, 1e-4, "db " + what);
      LinearGeluGrads only_db = linear_gelu_backward(g, x, w, r.pre, false, false, true);
      EXPECT_FALSE(only_db.dx.defined());
      EXPECT_FALSE(only_db.dw.defined());
      EXPECT_TRUE(equal(only_db.db, gr.db)) << what;
    }
  Tensor x3 = random_tensor({2, 3, 8}, 5), w = random_tensor({9, 8}, 6);
  LinearGeluResult r = linear_gelu(x3, w, Tensor());
  EXPECT_EQ(r.out.sizes(), (Shape{2, 3, 9}));
  EXPECT_THROW(linear_gelu(x3, random_tensor({9, 7}, 7), Tensor()), InvalidArgument);
  EXPECT_THROW(linear_gelu(x3, w, random_tensor({8}, 8)), InvalidArgument);
}

TEST_P(TransformerOps, LayerNormFloat32MatchesFloat64) {
  for (int64_t c : {1, 7, 64, 257, 768})
    for (int64_t rows : {1, 5, 300}) {
      const std::string what = "rows " + std::to_string(rows) + " C " + std::to_string(c);
      Tensor x = random_tensor({rows, c}, 1, kFloat32, -3, 5), d = random_tensor({rows, c}, 2);
      Tensor w = random_tensor({c}, 3), b = random_tensor({c}, 4);
      native::LayerNormResult r = native::layer_norm(x, {c}, w, b, 1e-5);
      native::LayerNormResult want = native::layer_norm(f64(x), {c}, f64(w), f64(b), 1e-5);
      expect_close(r.out, want.out, 1e-4, 1e-4, "layer_norm " + what);
      Tensor g = random_tensor({rows, c}, 5);
      native::LayerNormGrads gr =
          native::layer_norm_backward(g, x, {c}, r.mean, r.rstd, w, true, true, true);
      native::LayerNormGrads gw = native::layer_norm_backward(f64(g), f64(x), {c}, want.mean,
                                                              want.rstd, f64(w), true, true, true);
      expect_close(gr.dx, gw.dx, 1e-3, 1e-3, "layer_norm dx " + what);
      expect_close(gr.dweight, gw.dweight, 1e-4, 1e-4, "layer_norm dw " + what);
      expect_close(gr.dbias, gw.dbias, 1e-5, 1e-5, "layer_norm db " + what);
      // The fused residual form is layer_norm(x + delta), sum included.
      native::AddLayerNormResult a = native::add_layer_norm(x, d, w, b, 1e-5);
      Tensor s = native::binary(native::BinaryOp::kAdd, x, d);
      EXPECT_TRUE(equal(a.sum, s)) << what;
      native::LayerNormResult ln = native::layer_norm(s, {c}, w, b, 1e-5);
      EXPECT_TRUE(equal(a.norm.out, ln.out)) << what;
      EXPECT_TRUE(equal(a.norm.rstd, ln.rstd)) << what;
    }
  Tensor x = random_tensor({2, 3}, 1);
  EXPECT_THROW(native::add_layer_norm(x, random_tensor({3}, 2), Tensor(), Tensor(), 1e-5),
               InvalidArgument);
  EXPECT_THROW(native::add_layer_norm(x, x, random_tensor({2}, 2), Tensor(), 1e-5),
               InvalidArgument);
}

// log_softmax + nll_loss in float64: the composed oracle.
Tensor composed_ce(const Tensor& logits, const Tensor& target, Reduction red, int64_t ignore) {
  return native::nll_loss(native::log_softmax(f64(logits), -1), target, red, ignore);
}

TEST_P(TransformerOps, CrossEntropyMatchesComposed) {
  const Reduction reds[] = {Reduction::kNone, Reduction::kMean, Reduction::kSum};
  for (int64_t c : {1, 3, 9, 256, 5003})
    for (int64_t n : {1, 4, 37}) {
      const std::string what = "N " + std::to_string(n) + " C " + std::to_string(c);
      Tensor logits = random_tensor({n, c}, 1, kFloat32, -8, 8);
      std::vector<int64_t> t(n);
      for (int64_t i = 0; i < n; ++i) t[i] = i % 5 == 3 ? -100 : (i * 7919) % c;
      Tensor target = Tensor::from_vector(t, {n});
      for (Reduction red : reds) {
        const std::string w = what + " reduction " + std::to_string(static_cast<int>(red));
        CrossEntropyResult r = cross_entropy(logits, target, red, -100);
        Tensor want = composed_ce(logits, target, red, -100);
        expect_close(r.loss, want, 2e-6, 2e-6, "loss " + w);
        Tensor g = red == Reduction::kNone ? random_tensor({n}, 2) : Tensor::scalar(0.7);
        Tensor dx = cross_entropy_backward(g, logits, target, r.lse, red, -100);
        Tensor lsm = native::log_softmax(f64(logits), -1);
        Tensor dnll = native::nll_loss_backward(f64(g), lsm, target, red, -100);
        expect_close(dx, native::log_softmax_backward(dnll, lsm, -1), 1e-5, 1e-6,
                     "grad " + w);  // p - 1 rounds in float: ulp(1) |g|
      }
    }
  // Every row ignored: the mean is 0 / 0 = NaN and the gradient zero, as PyTorch.
  Tensor logits = random_tensor({3, 4}, 1);
  Tensor ignored = Tensor::from_vector<int64_t>({7, 7, 7}, {3});
  CrossEntropyResult r = cross_entropy(logits, ignored, Reduction::kMean, 7);
  EXPECT_TRUE(std::isnan(r.loss.item<double>()));
  EXPECT_EQ(cross_entropy(logits, ignored, Reduction::kSum, 7).loss.item<double>(), 0.0);
  Tensor dx =
      cross_entropy_backward(Tensor::scalar(1.0), logits, ignored, r.lse, Reduction::kMean, 7);
  EXPECT_TRUE(equal(dx, Tensor::zeros({3, 4})));
  // [C] logits with a 0-d target.
  Tensor one = random_tensor({6}, 3);
  Tensor t0 = Tensor::scalar(2.0, kInt64);
  expect_close(cross_entropy(one, t0, Reduction::kNone, -100).loss,
               composed_ce(one, t0, Reduction::kNone, -100), 1e-6, 1e-6, "[C] logits");
  EXPECT_EQ(cross_entropy_backward(Tensor::scalar(1.0), one, t0,
                                   cross_entropy(one, t0, Reduction::kMean, -100).lse,
                                   Reduction::kMean, -100)
                .sizes(),
            (Shape{6}));
  // Errors: a class out of range (naming the row), [N, C, d] logits, float targets.
  EXPECT_THROW(
      cross_entropy(logits, Tensor::from_vector<int64_t>({0, 4, 1}, {3}), Reduction::kMean, -100),
      InvalidArgument);
  EXPECT_THROW(cross_entropy(random_tensor({2, 3, 4}, 1), Tensor::zeros({2, 4}, kInt64),
                             Reduction::kMean, -100),
               InvalidArgument);
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({3}), Reduction::kMean, -100), InvalidArgument);
}

COHORT_INSTANTIATE_KERNEL_PATHS(TransformerOps);

}  // namespace
}  // namespace cohort::kernels
