// Elementwise kernels against per-element formulas (the oracle).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cohort/base/parallel.h"
#include "cohort/core/native/elementwise.h"

namespace cohort::native {
namespace {

Tensor rand_tensor(const Shape& s, uint64_t seed, DType dt = kFloat32) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> v(shape_numel(s));
  for (auto& x : v) x = u(g);
  return Tensor::from_vector(v, s).to(dt);
}

// Element of t at the broadcast multi-index idx of `out`.
double at(const Tensor& t, const Shape& out, const Shape& idx) {
  int64_t off = t.storage_offset();
  size_t lead = out.size() - t.sizes().size();
  for (size_t i = 0; i < t.sizes().size(); ++i)
    off += (t.sizes()[i] == 1 ? 0 : idx[lead + i]) * t.strides()[i];
  Tensor flat = Tensor::from_storage(t.storage(), {1}, {1}, off, t.dtype());
  return flat.item<double>();
}

void check_binary(BinaryOp op, const Tensor& a, const Tensor& b, double (*f)(double, double)) {
  Tensor out = binary(op, a, b);
  Shape s = out.sizes();
  auto got = out.to_vector<double>();
  Shape idx(s.size(), 0);
  for (size_t flat = 0; flat < got.size(); ++flat) {
    double want = f(at(a, s, idx), at(b, s, idx));
    ASSERT_NEAR(got[flat], want, 1e-5 * (1 + std::abs(want))) << "at " << flat;
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

TEST(Broadcast, Shapes) {
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 1}, "t"), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2}, "t"), (Shape{2}));
  EXPECT_THROW(broadcast_shapes({3}, {4}, "add"), InvalidArgument);
  try {
    broadcast_shapes({3}, {4}, "add");
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [3] and [4]"), std::string::npos);
  }
}

TEST(Broadcast, BinaryOpsMatchFormula) {
  auto add = [](double x, double y) { return x + y; };
  auto mulf = [](double x, double y) { return x * y; };
  auto divf = [](double x, double y) { return x / y; };
  auto subf = [](double x, double y) { return x - y; };
  auto maxf = [](double x, double y) { return std::max(x, y); };
  std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 5}, {4, 5}}, {{4, 5}, {5}}, {{4, 1}, {1, 5}},   {{3, 4, 5}, {4, 1}},
      {{2, 3}, {}},     {{}, {2, 3}},  {{70000}, {70000}}, {{300, 300}, {300, 1}}};
  uint64_t seed = 1;
  for (auto& [sa, sb] : cases) {
    Tensor a = rand_tensor(sa, seed++), b = rand_tensor(sb, seed++);
    check_binary(BinaryOp::kAdd, a, b, add);
    check_binary(BinaryOp::kSub, a, b, subf);
    check_binary(BinaryOp::kMul, a, b, mulf);
    check_binary(BinaryOp::kDiv, a, b, divf);
    check_binary(BinaryOp::kMaximum, a, b, maxf);
  }
  // Non-contiguous operands.
  Tensor a = rand_tensor({5, 4}, 99).transpose(0, 1);
  Tensor b = rand_tensor({4, 5}, 98);
  check_binary(BinaryOp::kMul, a, b, mulf);
  check_binary(BinaryOp::kAdd, a, rand_tensor({5}, 97), add);
}

TEST(Broadcast, ResultsDoNotDependOnThreads) {
  Tensor a = rand_tensor({257, 301}, 5), b = rand_tensor({301}, 6);
  Tensor one, four;
  {
    ThreadBudgetGuard g(1);
    one = binary(BinaryOp::kMul, a.transpose(0, 1).contiguous().transpose(0, 1), b);
  }
  {
    ThreadBudgetGuard g(4);
    four = binary(BinaryOp::kMul, a, b);
  }
  EXPECT_TRUE(equal(one, four));
}

TEST(Broadcast, DtypePromotion) {
  Tensor i = Tensor::from_vector<int64_t>({1, 2});
  Tensor f = Tensor::from_vector<float>({0.5f, 0.5f});
  EXPECT_EQ(binary(BinaryOp::kAdd, i, f).dtype(), kFloat32);
  EXPECT_EQ(binary(BinaryOp::kAdd, i, i).dtype(), kInt64);
  EXPECT_EQ(binary(BinaryOp::kDiv, i, i).dtype(), kFloat32);
  EXPECT_EQ(binary(BinaryOp::kAdd, f, f.to(kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(binary_scalar(BinaryOp::kMul, i, 2.0).to_vector<int64_t>(),
            (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(rbinary_scalar(BinaryOp::kSub, 1.0, f).to_vector<float>(),
            (std::vector<float>{0.5f, 0.5f}));
  EXPECT_THROW(unary(UnaryOp::kExp, Tensor::zeros({2}, kBFloat16)), NotSupported);
}

TEST(Broadcast, UnaryOpsMatchFormula) {
  Tensor x = rand_tensor({1000}, 3, kFloat64);
  auto v = x.to_vector<double>();
  auto check = [&](UnaryOp op, double (*f)(double)) {
    auto got = unary(op, x).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(got[i], f(v[i]), 1e-12) << i;
  };
  check(UnaryOp::kNeg, [](double a) { return -a; });
  check(UnaryOp::kExp, [](double a) { return std::exp(a); });
  check(UnaryOp::kAbs, [](double a) { return std::abs(a); });
  check(UnaryOp::kTanh, [](double a) { return std::tanh(a); });
  check(UnaryOp::kSigmoid, [](double a) { return 1 / (1 + std::exp(-a)); });
  check(UnaryOp::kRelu, [](double a) { return a > 0 ? a : 0.0; });
  check(UnaryOp::kGelu, [](double a) { return gelu_value(a); });
  auto l = unary(UnaryOp::kLog, unary(UnaryOp::kAbs, x)).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(l[i], std::log(std::abs(v[i])), 1e-12);
  auto c = clamp(x, -1, 1).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(c[i], std::clamp(v[i], -1.0, 1.0));
}

TEST(Broadcast, CompareAndWhere) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3});
  Tensor m = compare_scalar(CompareOp::kGt, a, 1.5);
  EXPECT_EQ(m.dtype(), kUInt8);
  EXPECT_EQ(m.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(compare(CompareOp::kEq, a, Tensor::from_vector<float>({1, 0, 3})).to_vector<uint8_t>(),
            (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(where(m, a, Tensor::scalar(0.0)).to_vector<float>(), (std::vector<float>{0, 2, 3}));
}

}  // namespace
}  // namespace cohort::native
