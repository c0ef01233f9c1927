#include "cohort/collectives/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/collectives/reduce_kernel_table.h"

namespace cohort::collectives {
namespace {

TEST(ReduceKernels, Float16ConversionsRoundToNearestEven) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(1e6f), 0x7c00);                // overflow -> inf
  EXPECT_EQ(float_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(float_to_f16(5.9604645e-8f), 0x0001);       // smallest subnormal
  EXPECT_FLOAT_EQ(f16_to_float(0x3555), 0.33325195f);
  EXPECT_FLOAT_EQ(f16_to_float(0x0001), 5.9604645e-8f);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(float_to_f16(f16_to_float(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(ReduceKernels, BFloat16ConversionsRoundToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);  // tie -> even (up)
  EXPECT_FLOAT_EQ(bf16_to_float(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ReduceKernels, EveryOpOnFloat32AndInt32) {
  std::vector<float> a{1, -2, 3, 4.5f}, b{2, 5, -1, 4.5f};
  auto run = [&](ReduceOp op) {
    std::vector<float> d = a;
    reduce_into(d.data(), b.data(), d.size(), DataType::kFloat32, op);
    return d;
  };
  EXPECT_EQ(run(ReduceOp::kSum), (std::vector<float>{3, 3, 2, 9}));
  EXPECT_EQ(run(ReduceOp::kAvg), (std::vector<float>{3, 3, 2, 9}));  // divided later
  EXPECT_EQ(run(ReduceOp::kProduct), (std::vector<float>{2, -10, -3, 20.25f}));
  EXPECT_EQ(run(ReduceOp::kMin), (std::vector<float>{1, -2, -1, 4.5f}));
  EXPECT_EQ(run(ReduceOp::kMax), (std::vector<float>{2, 5, 3, 4.5f}));
  std::vector<int32_t> x{7, -7, 9}, y{2, 2, -20};
  reduce_into(x.data(), y.data(), 3, DataType::kInt32, ReduceOp::kSum);
  finish_avg(x.data(), 3, DataType::kInt32, 2);
  EXPECT_EQ(x, (std::vector<int32_t>{4, -2, -5}));
}

TEST(ReduceKernels, HalfTypesReduceInFloat32) {
  std::vector<uint16_t> d{float_to_bf16(1.5f), float_to_bf16(-4.0f)};
  std::vector<uint16_t> s{float_to_bf16(2.25f), float_to_bf16(3.0f)};
  reduce_into(d.data(), s.data(), 2, DataType::kBFloat16, ReduceOp::kMax);
  EXPECT_FLOAT_EQ(bf16_to_float(d[0]), 2.25f);
  EXPECT_FLOAT_EQ(bf16_to_float(d[1]), 3.0f);
  std::vector<uint16_t> h{float_to_f16(0.5f), float_to_f16(3.0f)};
  std::vector<uint16_t> k{float_to_f16(0.25f), float_to_f16(-1.0f)};
  reduce_into(h.data(), k.data(), 2, DataType::kFloat16, ReduceOp::kSum);
  finish_avg(h.data(), 2, DataType::kFloat16, 2);
  EXPECT_FLOAT_EQ(f16_to_float(h[0]), 0.375f);
  EXPECT_FLOAT_EQ(f16_to_float(h[1]), 1.0f);
}

TEST(ReduceKernels, HalfTypesMatchScalarConversionsOnLongOddBuffers) {
  const size_t n = 1000 + 3;  // several blocks and a ragged tail
  for (DataType dt : {DataType::kBFloat16, DataType::kFloat16}) {
    auto to = dt == DataType::kBFloat16 ? float_to_bf16 : float_to_f16;
    auto from = dt == DataType::kBFloat16 ? bf16_to_float : f16_to_float;
    std::vector<uint16_t> d(n), s(n);
    for (size_t i = 0; i < n; ++i) {
      d[i] = to(static_cast<float>(i % 97) * 0.37f - 11.0f);
      s[i] = to(static_cast<float>(i % 13) * 1.9f);
    }
    d[5] = to(std::numeric_limits<float>::quiet_NaN());
    std::vector<uint16_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = to(from(d[i]) * from(s[i]));
    reduce_into(d.data(), s.data(), n, dt, ReduceOp::kProduct);
    EXPECT_TRUE(std::isnan(from(d[5])));
    d[5] = want[5] = 0;
    EXPECT_EQ(d, want) << dtype_name(dt);
  }
}

TEST(ReduceKernels, ElementSizesAndNames) {
  EXPECT_EQ(element_size(DataType::kFloat64), 8u);
  EXPECT_EQ(element_size(DataType::kUInt8), 1u);
  EXPECT_EQ(element_size(DataType::kFloat16), 2u);
  EXPECT_EQ(element_size(DataType::kInt8), 1u);
  EXPECT_EQ(element_size(DataType::kBool), 1u);
  EXPECT_EQ(dtype_name(DataType::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(DataType::kInt8), "int8");
  EXPECT_EQ(dtype_name(DataType::kBool), "bool");
  EXPECT_EQ(reduce_op_name(ReduceOp::kProduct), "product");
  EXPECT_EQ(reduce_op_name(ReduceOp::kBand), "band");
  EXPECT_EQ(reduce_op_name(ReduceOp::kBor), "bor");
  EXPECT_EQ(reduce_op_name(ReduceOp::kBxor), "bxor");
  // The enums go on the wire: the old values stay where they were.
  EXPECT_EQ(static_cast<int>(DataType::kFloat16), 6);
  EXPECT_EQ(static_cast<int>(DataType::kBool), kNumDataTypes - 1);
  EXPECT_EQ(static_cast<int>(ReduceOp::kMax), 4);
  EXPECT_EQ(static_cast<int>(ReduceOp::kBxor), kNumReduceOps - 1);
}

TEST(ReduceKernels, BoolReducesLogicallyToZeroOrOne) {
  // Every pair of inputs, and a non-zero byte other than 1 read as true.
  const std::vector<uint8_t> a{0, 0, 1, 1, 2}, b{0, 1, 0, 1, 1};
  auto run = [&](ReduceOp op) {
    std::vector<uint8_t> d = a;
    reduce_into(d.data(), b.data(), d.size(), DataType::kBool, op);
    return d;
  };
  const std::vector<uint8_t> logical_or{0, 1, 1, 1, 1}, logical_and{0, 0, 0, 1, 1},
      logical_xor{0, 1, 1, 0, 0};
  EXPECT_EQ(run(ReduceOp::kSum), logical_or);
  EXPECT_EQ(run(ReduceOp::kMax), logical_or);
  EXPECT_EQ(run(ReduceOp::kBor), logical_or);
  EXPECT_EQ(run(ReduceOp::kProduct), logical_and);
  EXPECT_EQ(run(ReduceOp::kMin), logical_and);
  EXPECT_EQ(run(ReduceOp::kBand), logical_and);
  EXPECT_EQ(run(ReduceOp::kBxor), logical_xor);
  std::vector<uint8_t> d = a;
  EXPECT_THROW(finish_avg(d.data(), d.size(), DataType::kBool, 2), InvalidArgument);
}

TEST(ReduceKernels, BitwiseOnIntegerTypes) {
  std::vector<int8_t> x{-5, 12, -128}, y{3, 10, 127};
  std::vector<int8_t> band = x, bor = x, bxor = x;
  reduce_into(band.data(), y.data(), 3, DataType::kInt8, ReduceOp::kBand);
  reduce_into(bor.data(), y.data(), 3, DataType::kInt8, ReduceOp::kBor);
  reduce_into(bxor.data(), y.data(), 3, DataType::kInt8, ReduceOp::kBxor);
  EXPECT_EQ(band, (std::vector<int8_t>{3, 8, 0}));
  EXPECT_EQ(bor, (std::vector<int8_t>{-5, 14, -1}));
  EXPECT_EQ(bxor, (std::vector<int8_t>{-8, 6, -1}));
  std::vector<int64_t> p{int64_t{1} << 40 | 6, -1}, q{int64_t{1} << 40 | 3, 5};
  reduce_into(p.data(), q.data(), 2, DataType::kInt64, ReduceOp::kBxor);
  EXPECT_EQ(p, (std::vector<int64_t>{5, -6}));
  std::vector<uint8_t> u{0xf0, 0x0f}, v{0x3c, 0x3c};
  reduce_into(u.data(), v.data(), 2, DataType::kUInt8, ReduceOp::kBor);
  EXPECT_EQ(u, (std::vector<uint8_t>{0xfc, 0x3f}));
  std::vector<int32_t> i{6, -1}, j{3, 9};
  reduce_into(i.data(), j.data(), 2, DataType::kInt32, ReduceOp::kBand);
  EXPECT_EQ(i, (std::vector<int32_t>{2, 9}));
  // int8 arithmetic and avg as the other integer types (truncating division).
  std::vector<int8_t> s{-7, 9}, t{2, 2};
  reduce_into(s.data(), t.data(), 2, DataType::kInt8, ReduceOp::kSum);
  finish_avg(s.data(), 2, DataType::kInt8, 2);
  EXPECT_EQ(s, (std::vector<int8_t>{-2, 5}));
}

TEST(ReduceKernels, BitwiseOnFloatTypesIsRefused) {
  std::vector<std::byte> d(8), s(8);
  for (DataType dt :
       {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16, DataType::kFloat16}) {
    for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
      try {
        reduce_into(d.data(), s.data(), 1, dt, op);
        ADD_FAILURE() << "accepted " << reduce_op_name(op) << " on " << dtype_name(dt);
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("needs an integer or bool dtype, got " +
                                             std::string(dtype_name(dt))),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

// Every kernel path against the reference loops (reduce_kernel_table.h);
// paths this CPU cannot run are reported as skipped.
class ReduceKernelPaths : public cohort::testing::KernelPathTest {};

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProduct, ReduceOp::kMin,
                             ReduceOp::kMax};
constexpr size_t kLengths[] = {0, 1, 7, 15, 17, 33, 255, 257, 1000, 1003};

// Random floats with NaN, inf and -inf on either side, in different places.
std::vector<float> inputs(size_t n, uint64_t seed, bool dst_side) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-100, 100);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  if (n > 4) {
    v[dst_side ? 0 : 1] = nan;
    v[dst_side ? 2 : 3] = inf;
    v[n - 1] = dst_side ? -inf : nan;
    v[n / 2] = dst_side ? -0.0f : 0.0f;
  }
  return v;
}

// Bit equality, any NaN matching any NaN of the same sign (NaN payloads
// differ between F16C and the scalar float16 conversion).
template <typename T>
bool same(T a, T b) {
  if (a != a || b != b) return a != a && b != b && std::signbit(a) == std::signbit(b);
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T, typename Kernel>
void expect_matches_reference(Kernel ReduceKernelTable::*kernel, DataType dt,
                              const std::vector<T>& dst0, const std::vector<T>& src,
                              float (*decode)(uint16_t)) {
  for (ReduceOp op : kOps) {
    std::vector<T> got = dst0, want = dst0;
    reduce_into(got.data(), src.data(), got.size(), dt, op);
    (reduce_kernel_table_reference().*kernel)(want.data(), src.data(), want.size(), op);
    for (size_t i = 0; i < got.size(); ++i) {
      bool ok;
      if constexpr (std::is_same_v<T, uint16_t>)
        ok = same(decode(got[i]), decode(want[i])) &&
             (decode(got[i]) != decode(got[i]) || got[i] == want[i]);
      else
        ok = same(got[i], want[i]);
      ASSERT_TRUE(ok) << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << got.size() << " ["
                      << i << "]: " << +got[i] << " vs reference " << +want[i];
    }
  }
}

TEST_P(ReduceKernelPaths, Float32MatchesReference) {
  for (size_t n : kLengths)
    expect_matches_reference<float>(&ReduceKernelTable::f32, DataType::kFloat32, inputs(n, 1, true),
                                    inputs(n, 2, false), nullptr);
}

TEST_P(ReduceKernelPaths, Float64MatchesReference) {
  for (size_t n : kLengths) {
    std::vector<float> a = inputs(n, 3, true), b = inputs(n, 4, false);
    std::vector<double> d(a.begin(), a.end()), s(b.begin(), b.end());
    for (size_t i = 0; i < n; ++i) d[i] *= 1.0 + 1e-12 * static_cast<double>(i);  // past float
    expect_matches_reference<double>(&ReduceKernelTable::f64, DataType::kFloat64, d, s, nullptr);
  }
}

TEST_P(ReduceKernelPaths, BFloat16MatchesReference) {
  for (size_t n : kLengths) {
    std::vector<float> a = inputs(n, 5, true), b = inputs(n, 6, false);
    std::vector<uint16_t> d(n), s(n);
    for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(a[i]), s[i] = float_to_bf16(b[i]);
    expect_matches_reference<uint16_t>(&ReduceKernelTable::bf16, DataType::kBFloat16, d, s,
                                       &bf16_to_float);
  }
}

TEST_P(ReduceKernelPaths, Float16MatchesReference) {
  for (size_t n : kLengths) {
    std::vector<float> a = inputs(n, 7, true), b = inputs(n, 8, false);
    std::vector<uint16_t> d(n), s(n);
    for (size_t i = 0; i < n; ++i) d[i] = float_to_f16(a[i]), s[i] = float_to_f16(b[i]);
    expect_matches_reference<uint16_t>(&ReduceKernelTable::f16, DataType::kFloat16, d, s,
                                       &f16_to_float);
  }
}

// Every float16 value through both conversions (x * 1 and x + -0 are x), and
// sums and products that round (halves, subnormals, overflow to inf), as the
// scalar conversion gives them.
TEST_P(ReduceKernelPaths, Float16ConversionsMatchScalarForEveryValue) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const std::vector<uint16_t> one(all.size(), float_to_f16(1.0f));
  const std::vector<uint16_t> neg_zero(all.size(), 0x8000);
  std::vector<uint16_t> shuffled = all;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(9));
  expect_matches_reference<uint16_t>(&ReduceKernelTable::f16, DataType::kFloat16, all, one,
                                     &f16_to_float);
  expect_matches_reference<uint16_t>(&ReduceKernelTable::f16, DataType::kFloat16, all, neg_zero,
                                     &f16_to_float);
  expect_matches_reference<uint16_t>(&ReduceKernelTable::f16, DataType::kFloat16, all, shuffled,
                                     &f16_to_float);
  expect_matches_reference<uint16_t>(&ReduceKernelTable::bf16, DataType::kBFloat16, all, shuffled,
                                     &bf16_to_float);
}

COHORT_INSTANTIATE_KERNEL_PATHS(ReduceKernelPaths);

}  // namespace
}  // namespace cohort::collectives
