#include "cohort/core/tensor.h"

#include <gtest/gtest.h>

#include <bit>

#include "cohort/core/autograd_meta.h"

namespace cohort {
namespace {

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(Tensor::ones({4}, kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(Tensor::full({2}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(Tensor::arange(4).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::arange(1.0, 2.0, 0.25).numel(), 4);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor().sizes(), InvalidArgument);
}

TEST(Tensor, LikeFactories) {
  Tensor t = Tensor::arange(6).reshape({2, 3}).transpose(0, 1);
  Tensor z = zeros_like(t);
  EXPECT_EQ(z.sizes(), (Shape{3, 2}));
  EXPECT_EQ(z.dtype(), kInt64);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(ones_like(t).to_vector<int64_t>(), std::vector<int64_t>(6, 1));
  EXPECT_EQ(full_like(t, 4).to_vector<int64_t>(), std::vector<int64_t>(6, 4));
  EXPECT_EQ(empty_like(t).numel(), 6);
}

TEST(Tensor, CopyAliasesCloneCopies) {
  Tensor a = Tensor::zeros({3});
  Tensor b = a;
  b.fill_(7);
  EXPECT_EQ(a.to_vector<float>()[0], 7.0f);
  Tensor c = a.clone();
  c.fill_(1);
  EXPECT_EQ(a.to_vector<float>()[0], 7.0f);
  EXPECT_TRUE(a.is_same(b));
  EXPECT_FALSE(a.is_same(c));
}

TEST(Tensor, DataPtrChecksDtype) {
  Tensor t = Tensor::zeros({2}, kInt64);
  EXPECT_NO_THROW(t.data_ptr<int64_t>());
  EXPECT_THROW(t.data_ptr<float>(), InvalidArgument);
  EXPECT_EQ(Tensor::scalar(3.0).item<int64_t>(), 3);
  EXPECT_THROW(t.item<float>(), InvalidArgument);
}

TEST(Tensor, FromVectorChecksCount) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.sizes(), (Shape{2, 3}));
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), InvalidArgument);
  EXPECT_EQ(Tensor::from_vector<uint8_t>({1, 2}).dtype(), kUInt8);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::arange(0.0, 6.0, 1.0).reshape({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.sizes(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tt.contiguous().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(t.contiguous().is_same(t));
  Tensor row = t.select(0, 1);
  row.fill_(9);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 2, 9, 9, 9}));
  EXPECT_EQ(t.narrow(1, 1, 2).to_vector<float>(), (std::vector<float>{1, 2, 9, 9}));
  EXPECT_EQ(t.unsqueeze(0).sizes(), (Shape{1, 2, 3}));
  EXPECT_EQ(t.unsqueeze(-1).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(t.unsqueeze(0).squeeze(0).sizes(), (Shape{2, 3}));
  EXPECT_EQ(t.permute({1, 0}).to_vector<float>(), tt.to_vector<float>());
  EXPECT_EQ(t.view({-1}).sizes(), (Shape{6}));
  EXPECT_THROW(tt.view({6}), InvalidArgument);
  EXPECT_EQ(tt.reshape({6}).to_vector<float>(), (std::vector<float>{0, 9, 1, 9, 2, 9}));
  Tensor e = Tensor::from_vector<float>({1, 2}, {2, 1}).expand({2, 3});
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  EXPECT_THROW(t.expand({3, 3}), InvalidArgument);
  EXPECT_EQ(Tensor::zeros({2, 3, 4}).flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_THROW(t.select(0, 2), InvalidArgument);
  EXPECT_THROW(t.narrow(1, 2, 2), InvalidArgument);
}

TEST(Tensor, CopyBroadcastsAndConverts) {
  Tensor d = Tensor::zeros({2, 3}, kFloat64);
  d.copy_(Tensor::from_vector<int64_t>({1, 2, 3}));
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_THROW(d.copy_(Tensor::zeros({4})), InvalidArgument);
  // Non-contiguous destination.
  Tensor t = Tensor::zeros({3, 2});
  t.transpose(0, 1).copy_(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Tensor, LowPrecisionConversions) {
  Tensor f = Tensor::from_vector<float>({1.0f, -2.5f, 3.140625f, 65504.0f, 1e-7f});
  Tensor bf = f.to(kBFloat16);
  EXPECT_EQ(bf.dtype(), kBFloat16);
  EXPECT_EQ(bf.nbytes(), 10u);
  auto back = bf.to(kFloat32).to_vector<float>();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[2], 3.140625f);
  auto h = f.to(kFloat16).to(kFloat32).to_vector<float>();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_EQ(h[2], 3.140625f);
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_NEAR(h[4], 1e-7f, 6e-8);  // subnormal half
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(70000.0f))));
  EXPECT_EQ(static_cast<float>(BFloat16(1.00390625f)), 1.0f);  // ties to even
  // The vectorised contiguous path agrees with the scalar conversion.
  std::vector<float> many;
  for (int i = -2000; i < 2000; ++i) many.push_back(static_cast<float>(i) * 1.2345e-3f * i);
  many.push_back(NAN);
  many.push_back(INFINITY);
  many.push_back(-3.0e38f);
  Tensor mt = Tensor::from_vector(many);
  Tensor mb = mt.to(kBFloat16);
  const BFloat16* pb = mb.data_ptr<BFloat16>();
  for (size_t i = 0; i < many.size(); ++i) {
    if (std::isnan(many[i])) {
      ASSERT_TRUE(std::isnan(static_cast<float>(pb[i])));
    } else {
      ASSERT_EQ(pb[i].bits, BFloat16(many[i]).bits) << many[i];
    }
  }
  auto round_trip = mb.to(kFloat32).to_vector<float>();
  for (size_t i = 0; i + 3 < many.size(); ++i)
    ASSERT_EQ(round_trip[i], static_cast<float>(BFloat16(many[i])));
}

// The contiguous float <-> float16 loops (tensor.cc's selects) against the
// scalar Half conversion, the oracle: every half value, and floats across
// every exponent with the rounding cases (ties, subnormals, overflow, NaN).
TEST(Tensor, Float16ContiguousConversionsMatchTheScalarOnes) {
  std::vector<Half> halves(65536);
  for (uint32_t b = 0; b < 65536; ++b) halves[b].bits = static_cast<uint16_t>(b);
  Tensor h = Tensor::empty({65536}, kFloat16);
  std::copy(halves.begin(), halves.end(), h.data_ptr<Half>());
  const std::vector<float> up = h.to(kFloat32).to_vector<float>();
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = static_cast<float>(halves[b]);
    ASSERT_EQ(std::bit_cast<uint32_t>(up[b]), std::bit_cast<uint32_t>(want)) << "half bits " << b;
  }
  std::vector<float> floats;
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x3000u, 0x2000u, 0x7fe000u, 0x7ff000u,
                       0x7fffffu, 0x123456u})
      for (uint32_t sign : {0u, 0x80000000u})
        floats.push_back(std::bit_cast<float>(sign | e << 23 | m));
  const Tensor down = Tensor::from_vector(floats).to(kFloat16);
  const Half* got = down.data_ptr<Half>();
  for (size_t i = 0; i < floats.size(); ++i)
    ASSERT_EQ(got[i].bits, Half(floats[i]).bits)
        << "float bits " << std::bit_cast<uint32_t>(floats[i]);
}

TEST(Tensor, InPlaceMath) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3});
  a.add_(Tensor::from_vector<float>({1, 1, 1}), 2.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{3, 4, 5}));
  a.mul_(2.0).add_(-1.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{5, 7, 9}));
  a.addcmul_(Tensor::full({3}, 2.0), Tensor::full({3}, 3.0), 0.5);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{8, 10, 12}));
  a.addcdiv_(Tensor::full({3}, 4.0), Tensor::full({3}, 2.0), -1.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{6, 8, 10}));
  a.clamp_(7, 9);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{7, 8, 9}));
  Tensor s = Tensor::full({2}, 16.0);
  s.sqrt_();
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{4, 4}));
}

TEST(Tensor, AutogradStateOnLeaves) {
  Tensor w = Tensor::zeros({2});
  EXPECT_FALSE(w.requires_grad());
  w.set_requires_grad(true);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_THROW(Tensor::zeros({2}, kInt64).set_requires_grad(true), InvalidArgument);
  w.set_grad(Tensor::ones({2}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_THROW(w.set_grad(Tensor::ones({3})), InvalidArgument);
  EXPECT_FALSE(w.detach().requires_grad());
  int calls = 0;
  GradHookHandle h = w.register_grad_ready_hook([&](Tensor&) { ++calls; });
  EXPECT_EQ(w.autograd_meta().hooks.size(), 1u);
  h.remove();
  h.remove();
  EXPECT_EQ(w.autograd_meta().hooks.size(), 0u);
}

TEST(Tensor, PrintsShapeAndValues) {
  std::string s = to_string(Tensor::from_vector<float>({1, 2}, {1, 2}));
  EXPECT_NE(s.find("[1, 2]"), std::string::npos);
  EXPECT_NE(s.find("float32"), std::string::npos);
  EXPECT_EQ(to_string(Tensor()), "Tensor(undefined)");
}

TEST(Tensor, EqualAndAllclose) {
  Tensor a = Tensor::from_vector<float>({1, 2});
  EXPECT_TRUE(equal(a, a.to(kFloat64)));
  EXPECT_FALSE(equal(a, Tensor::from_vector<float>({1, 3})));
  EXPECT_TRUE(allclose(a, Tensor::from_vector<float>({1, 2.00001f}), 1e-4));
  EXPECT_FALSE(allclose(a, Tensor::from_vector<float>({1, 2.1f})));
  EXPECT_FALSE(allclose(a, a.reshape({2, 1})));
}

}  // namespace
}  // namespace cohort
