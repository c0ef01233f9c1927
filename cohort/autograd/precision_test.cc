// The precision policy (precision.h): the scope restores and is per thread; a
// path the CPU lacks is refused when the scope opens; matmul, linear,
// linear_gelu and linear_gelu_linear under bf16 on every path this CPU runs: float32 results equal
// to the product of the rounded inputs, close to float32 within bf16 tolerance, float32 gradients
// computed in bf16; what the graph keeps is the bf16 copy, not the float32 input; float64
// (gradcheck) is never rounded.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "cohort/autograd/gradcheck.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/base/error.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort {
namespace {

using autograd::gradcheck;
using In = const std::vector<Tensor>&;

Tensor randn(const Shape& s, uint64_t seed, DType dt = kFloat32, bool grad = true) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = n(g);
  return Tensor::from_vector(v, s).to(dt).set_requires_grad(grad);
}

// float32 -> bf16 -> float32: the value a bf16 op multiplies.
Tensor rounded(const Tensor& t) { return native::bf16_to_float(native::to_bf16(t.detach())); }

TEST(PrecisionScope, RestoresOnExitAndNests) {
  EXPECT_FALSE(current_precision().is_bf16());
  {
    PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
    EXPECT_TRUE(current_precision().is_bf16());
    EXPECT_EQ(current_precision().bf16_path, native::Bf16Path::kEmulated);
    {
      PrecisionScope fp32(PrecisionPolicy::fp32());
      EXPECT_FALSE(current_precision().is_bf16());
    }
    EXPECT_TRUE(current_precision().is_bf16());
  }
  EXPECT_FALSE(current_precision().is_bf16());
  // Also when left by an exception.
  try {
    PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
    throw std::runtime_error("leave");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(current_precision().is_bf16());
}

TEST(PrecisionScope, IsThreadLocal) {
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  bool other_bf16 = true, other_after = false;
  std::thread t([&] {
    other_bf16 = current_precision().is_bf16();
    PrecisionScope inner(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
    other_after = current_precision().is_bf16();
  });
  t.join();
  EXPECT_FALSE(other_bf16);  // a new thread starts in float32
  EXPECT_TRUE(other_after);
  EXPECT_TRUE(current_precision().is_bf16());  // untouched by the other thread's scope
  Tensor x = randn({3, 4}, 1), w = randn({5, 4}, 2);
  Tensor on_thread;
  std::thread u([&] { on_thread = linear(x, w); });
  u.join();
  EXPECT_TRUE(allclose(on_thread, native::linear(x.detach(), w.detach(), Tensor()), 0, 0));
}

TEST(PrecisionScope, RefusesAPathThisCpuLacks) {
  const std::string why = native::bf16_path_unsupported_reason(native::Bf16Path::kOnednn);
  if (why.empty()) {
    EXPECT_NO_THROW(PrecisionScope s(PrecisionPolicy::bf16(native::Bf16Path::kOnednn)));
    return;
  }
  try {
    PrecisionScope s(PrecisionPolicy::bf16(native::Bf16Path::kOnednn));
    FAIL() << "opened a scope on a bf16 path this CPU lacks";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("onednn"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_FALSE(current_precision().is_bf16());
  EXPECT_EQ(parse_precision("bf16"), ComputePrecision::kBFloat16);
  EXPECT_EQ(parse_precision("fp32"), ComputePrecision::kFloat32);
  EXPECT_THROW(parse_precision("fp16"), InvalidArgument);
}

// loss = sum(f(inputs) * r): the gradient reaching f's output is r.
struct OpRun {
  Tensor out;
  std::vector<Tensor> grads;
};
template <typename F>
OpRun run(F f, std::vector<Tensor> inputs, const Tensor& r) {
  for (Tensor& t : inputs)
    if (t.defined()) t = t.detach().set_requires_grad(true);
  OpRun res;
  res.out = f(inputs);
  sum(res.out * r).backward();
  for (const Tensor& t : inputs) res.grads.push_back(t.defined() ? t.grad() : Tensor());
  return res;
}

TEST(Bf16Ops, LinearMatmulAndLinearGeluOnEveryPath) {
  Tensor x = randn({2, 6, 40}, 1), w = randn({24, 40}, 2), b = randn({24}, 3);
  Tensor r = randn({2, 6, 24}, 4, kFloat32, false);
  Tensor p = randn({3, 5, 40}, 5), q = randn({40, 7}, 6);
  Tensor rq = randn({3, 5, 7}, 7, kFloat32, false);
  auto lin = [](In v) { return linear(v[0], v[1], v[2]); };
  auto lg = [](In v) { return linear_gelu(v[0], v[1], v[2]); };
  auto mm = [](In v) { return matmul(v[0], v[1]); };
  const OpRun lin32 = run(lin, {x, w, b}, r), lg32 = run(lg, {x, w, b}, r),
              mm32 = run(mm, {p, q}, rq);
  for (native::Bf16Path path : native::supported_bf16_paths()) {
    SCOPED_TRACE(native::bf16_path_name(path));
    PrecisionScope bf16(PrecisionPolicy::bf16(path));
    const OpRun l16 = run(lin, {x, w, b}, r), g16 = run(lg, {x, w, b}, r),
                m16 = run(mm, {p, q}, rq);
    // Forward: float32 out, the product of the rounded inputs.
    ASSERT_EQ(l16.out.dtype(), kFloat32);
    Tensor want = native::linear(rounded(x), rounded(w), b.detach());
    EXPECT_TRUE(allclose(l16.out, want, 1e-5, 1e-5));
    EXPECT_TRUE(allclose(l16.out, lin32.out, 2e-2, 5e-2));
    EXPECT_TRUE(allclose(g16.out, lg32.out, 2e-2, 5e-2));
    EXPECT_TRUE(allclose(m16.out, native::matmul(rounded(p), rounded(q)), 1e-5, 1e-5));
    EXPECT_TRUE(allclose(m16.out, mm32.out, 2e-2, 5e-2));
    // Backward: float32 gradients from bf16 products (the gradient rounded too).
    Tensor r2 = rounded(r).reshape({12, 24});
    Tensor gx = native::mm(r2, rounded(w)).reshape({2, 6, 40});
    Tensor gw = native::mm(r2.transpose(0, 1), rounded(x).reshape({12, 40}));
    ASSERT_EQ(l16.grads[1].dtype(), kFloat32);
    EXPECT_TRUE(allclose(l16.grads[0], gx, 1e-5, 1e-5));
    EXPECT_TRUE(allclose(l16.grads[1], gw, 1e-5, 1e-4));
    EXPECT_TRUE(allclose(l16.grads[2], lin32.grads[2], 1e-5, 1e-5));  // bias: float32 sum
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(allclose(l16.grads[i], lin32.grads[i], 2e-2, 1e-1)) << i;
      EXPECT_TRUE(allclose(g16.grads[i], lg32.grads[i], 2e-2, 1e-1)) << i;
    }
    for (size_t i = 0; i < 2; ++i)
      EXPECT_TRUE(allclose(m16.grads[i], mm32.grads[i], 2e-2, 1e-1)) << i;
  }
}

// linear_gelu_linear under bf16 is one node with the gradients of its two
// ops run one after another: the same bits but for the first bias (its sum
// taken in another order), on every path and for every subset of inputs that
// needs a gradient; without biases too. Under float32 it is the two ops.
TEST(Bf16Ops, LinearGeluLinearIsOneNodeWithTheTwoOpsGradients) {
  Tensor x = randn({3, 50, 40}, 1), w1 = randn({96, 40}, 2), b1 = randn({96}, 3);
  Tensor w2 = randn({24, 96}, 4), b2 = randn({24}, 5);
  Tensor r = randn({3, 50, 24}, 6, kFloat32, false);
  auto fused = [](In v) { return linear_gelu_linear(v[0], v[1], v[2], v[3], v[4]); };
  auto two = [](In v) { return linear(linear_gelu(v[0], v[1], v[2]), v[3], v[4]); };
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.defined() == b.defined() &&
           (!a.defined() ||
            (a.sizes() == b.sizes() && a.to_vector<float>() == b.to_vector<float>()));
  };
  const OpRun f32 = run(fused, {x, w1, b1, w2, b2}, r), t32 = run(two, {x, w1, b1, w2, b2}, r);
  EXPECT_TRUE(same_bits(f32.out, t32.out));
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(f32.grads[i], t32.grads[i])) << i;
  for (native::Bf16Path path : native::supported_bf16_paths()) {
    SCOPED_TRACE(native::bf16_path_name(path));
    PrecisionScope bf16(PrecisionPolicy::bf16(path));
    for (bool biases : {true, false}) {
      const std::vector<Tensor> in = {x, w1, biases ? b1 : Tensor(), w2, biases ? b2 : Tensor()};
      const OpRun f = run(fused, in, r), t = run(two, in, r);
      ASSERT_EQ(f.out.sizes(), Shape({3, 50, 24}));
      EXPECT_EQ(f.out.grad_fn()->name(), "linear_gelu_linear_bf16");
      EXPECT_TRUE(same_bits(f.out, t.out));
      for (size_t i : {0, 1, 3, 4}) EXPECT_TRUE(same_bits(f.grads[i], t.grads[i])) << i;
      ASSERT_EQ(f.grads[2].defined(), biases);
      if (biases) {
        EXPECT_TRUE(allclose(f.grads[2], t.grads[2], 1e-5, 1e-5));
      }
    }
    // Only some inputs need a gradient: the others get none.
    const OpRun t = run(two, {x, w1, b1, w2, b2}, r);
    for (int only : {0, 1, 3}) {
      std::vector<Tensor> in = {x.detach(), w1.detach(), b1.detach(), w2.detach(), b2.detach()};
      in[only] = in[only].clone().set_requires_grad(true);
      Tensor y = linear_gelu_linear(in[0], in[1], in[2], in[3], in[4]);
      sum(y * r).backward();
      for (int i = 0; i < 5; ++i) EXPECT_EQ(in[i].grad().defined(), i == only) << only << " " << i;
      EXPECT_TRUE(same_bits(in[only].grad(), t.grads[only])) << only;
    }
  }
}

TEST(Bf16Ops, LinearGeluLinearNamesTheShapesThatDoNotChain) {
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  try {
    linear_gelu_linear(randn({2, 8}, 1), randn({16, 8}, 2), Tensor(), randn({4, 15}, 3));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("linear_gelu_linear: input [2, 8], w1 [16, 8] and w2 "
                                         "[4, 15] do not chain"),
              std::string::npos)
        << e.what();
  }
}

TEST(Bf16Ops, TheGraphKeepsTheBf16CopyNotTheFloat32Input) {
  Tensor x = randn({8, 16}, 1), w = randn({4, 16}, 2);
  const long before = x.storage().use_count();
  Tensor y32 = linear(x, w);
  EXPECT_GT(x.storage().use_count(), before);  // float32: backward holds x itself
  y32 = Tensor();
  EXPECT_EQ(x.storage().use_count(), before);
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  Tensor y16 = linear(x, w), z16 = linear_gelu(x, w), m16 = matmul(x, w.transpose(0, 1));
  EXPECT_EQ(x.storage().use_count(), before);  // bf16: only the rounded copy
  sum(y16 + z16 + m16).backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
}

// LayerNorm, the residual add + LayerNorm and linear_gelu write their
// output's bf16 rounding in the same pass under bf16 (for the next GEMM):
// it is the output's rounding bit for bit; float32 writes none.
TEST(Bf16Ops, NormAndGeluOutputsCarryTheirBf16Rounding) {
  Tensor x = randn({3, 5, 16}, 1), d = randn({3, 5, 16}, 2), w = randn({16}, 3), b = randn({16}, 4);
  Tensor fw = randn({32, 16}, 5), fb = randn({32}, 6);
  auto outputs = [&] {
    return std::vector<Tensor>{layer_norm(x, {16}, w, b, 1e-5),
                               add_layer_norm(x, d, w, b, 1e-5).second, linear_gelu(x, fw, fb)};
  };
  for (const Tensor& y : outputs()) EXPECT_EQ(y.unsafe_impl()->bf16_twin, nullptr);
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  for (const Tensor& y : outputs()) {
    ASSERT_NE(y.unsafe_impl()->bf16_twin, nullptr);
    Tensor twin = native::to_bf16(y);
    EXPECT_EQ(static_cast<void*>(twin.data_ptr<BFloat16>()),
              y.unsafe_impl()->bf16_twin->storage->data());
    EXPECT_EQ(twin.to_vector<float>(), native::to_bf16(y.clone()).to_vector<float>());
  }
}

TEST(Bf16Ops, Float64IsNeverRoundedSoGradcheckPasses) {
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  Tensor x = randn({2, 3, 5}, 1, kFloat64), w = randn({4, 5}, 2, kFloat64),
         b = randn({4}, 3, kFloat64), q = randn({5, 3}, 4, kFloat64);
  for (auto f : {+[](In v) { return linear(v[0], v[1], v[2]); },
                 +[](In v) { return linear_gelu(v[0], v[1], v[2]); }}) {
    auto res = gradcheck(f, {x, w, b});
    EXPECT_TRUE(res.ok) << res.message;
  }
  auto mlp = gradcheck([](In v) { return linear_gelu_linear(v[0], v[1], v[2], v[3]); },
                       {x, w, b, randn({3, 4}, 5, kFloat64)});
  EXPECT_TRUE(mlp.ok) << mlp.message;
  auto res = gradcheck([](In v) { return matmul(v[0], v[1]); }, {x, q});
  EXPECT_TRUE(res.ok) << res.message;
}

// conv2d (and its fused ReLU) and attention under bf16: the float32 op on the
// rounded inputs, and gradients from the rounded gradient, within float32
// accumulation of it; close to float32 within bf16 tolerance.
TEST(Bf16Ops, Conv2dAndAttentionRoundTheirOperands) {
  Tensor x = randn({2, 3, 8, 8}, 1), w = randn({4, 3, 3, 3}, 2), b = randn({4}, 3);
  Tensor rc = randn({2, 4, 8, 8}, 4, kFloat32, false);
  Tensor q = randn({2, 2, 6, 8}, 5), k = randn({2, 2, 6, 8}, 6), v = randn({2, 2, 6, 8}, 7);
  Tensor ra = randn({2, 2, 6, 8}, 8, kFloat32, false);
  auto conv = [](In a) { return conv2d(a[0], a[1], a[2], {1, 1}, {1, 1}); };
  auto conv_relu = [](In a) { return conv2d_relu(a[0], a[1], a[2], {1, 1}, {1, 1}); };
  auto attn = [](In a) { return scaled_dot_product_attention(a[0], a[1], a[2], true); };
  const OpRun c32 = run(conv, {x, w, b}, rc), cr32 = run(conv_relu, {x, w, b}, rc);
  const OpRun a32 = run(attn, {q, k, v}, ra);
  // The float32 ops on rounded inputs with a rounded incoming gradient.
  const OpRun cwant = run(conv, {rounded(x), rounded(w), b}, rounded(rc));
  const OpRun awant = run(attn, {rounded(q), rounded(k), rounded(v)}, rounded(ra));
  PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
  const OpRun c16 = run(conv, {x, w, b}, rc), cr16 = run(conv_relu, {x, w, b}, rc);
  const OpRun a16 = run(attn, {q, k, v}, ra);
  EXPECT_TRUE(allclose(c16.out, cwant.out, 0, 0));
  EXPECT_TRUE(allclose(a16.out, awant.out, 0, 0));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(allclose(c16.grads[i], cwant.grads[i], 0, 0)) << i;
    EXPECT_TRUE(allclose(c16.grads[i], c32.grads[i], 2e-2, 1e-1)) << i;
    EXPECT_TRUE(allclose(cr16.grads[i], cr32.grads[i], 2e-2, 1e-1)) << i;
    // Attention's backward reads the output kept in bf16: close, not equal.
    EXPECT_TRUE(allclose(a16.grads[i], awant.grads[i], 1e-2, 2e-2)) << i;
    EXPECT_TRUE(allclose(a16.grads[i], a32.grads[i], 2e-2, 5e-2)) << i;
  }
  EXPECT_TRUE(allclose(c16.out, c32.out, 2e-2, 5e-2));
  EXPECT_TRUE(allclose(cr16.out, cr32.out, 2e-2, 5e-2));
  EXPECT_TRUE(allclose(a16.out, a32.out, 2e-2, 2e-2));
  // What the graph keeps is the bf16 copy, not the float32 input.
  Tensor xs = x.detach().set_requires_grad(true);
  const long before = xs.storage().use_count();
  Tensor y = conv(std::vector<Tensor>{xs, w, b});
  Tensor z = attn(std::vector<Tensor>{q, xs.reshape({2, 2, 6, 16}).narrow(3, 0, 8), v});
  EXPECT_EQ(xs.storage().use_count(), before);
}

// On the kAvx512Bf16 path attention multiplies in bf16 too (P and dS
// rounded): close to float32 within bf16 tolerance, and not the widened
// products' values.
TEST(Bf16Ops, AttentionOnBf16ProductsStaysCloseToFloat32) {
  if (!native::bf16_path_supported(native::Bf16Path::kAvx512Bf16))
    GTEST_SKIP() << "this CPU has no avx512_bf16";
  Tensor q = randn({2, 2, 70, 32}, 5), k = randn({2, 2, 70, 32}, 6), v = randn({2, 2, 70, 32}, 7);
  Tensor ra = randn({2, 2, 70, 32}, 8, kFloat32, false);
  auto attn = [](In a) { return scaled_dot_product_attention(a[0], a[1], a[2], true); };
  const OpRun a32 = run(attn, {q, k, v}, ra);
  OpRun widened, products;
  {
    PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kEmulated));
    widened = run(attn, {q, k, v}, ra);
  }
  {
    PrecisionScope bf16(PrecisionPolicy::bf16(native::Bf16Path::kAvx512Bf16));
    products = run(attn, {q, k, v}, ra);
  }
  EXPECT_TRUE(allclose(products.out, a32.out, 2e-2, 2e-2));
  EXPECT_FALSE(allclose(products.out, widened.out, 0, 0));
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(allclose(products.grads[i], a32.grads[i], 2e-2, 5e-2)) << i;
}

}  // namespace
}  // namespace cohort
