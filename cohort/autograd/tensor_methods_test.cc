// Tensor's math members (LibTorch's spellings) give what the free functions
// of ops.h give, record autograd like them, and the dtype aliases name the
// same dtypes; from_blob tensors over borrowed memory go through the kernels.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "cohort/autograd/ops.h"
#include "cohort/core/random.h"

namespace cohort {
namespace {

bool same(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor x = a.to(kF64), y = b.to(kF64);
  return x.to_vector<double>() == y.to_vector<double>();
}

TEST(TensorMethods, EqualTheFreeFunctions) {
  Generator gen(7);
  Tensor x = randn({3, 4}, gen), y = randn({3, 4}, gen);
  Tensor pos = rand({3, 4}, gen) + 0.5;
  EXPECT_TRUE(same(x.add(y), add(x, y)));
  EXPECT_TRUE(same(x.add(2.0), add(x, 2.0)));
  EXPECT_TRUE(same(x.sub(y), sub(x, y)));
  EXPECT_TRUE(same(x.sub(2.0), sub(x, 2.0)));
  EXPECT_TRUE(same(x.mul(y), mul(x, y)));
  EXPECT_TRUE(same(x.mul(3.0), mul(x, 3.0)));
  EXPECT_TRUE(same(x.div(pos), div(x, pos)));
  EXPECT_TRUE(same(x.div(4.0), div(x, 4.0)));
  EXPECT_TRUE(same(x.neg(), neg(x)));
  EXPECT_TRUE(same(x.abs(), abs(x)));
  EXPECT_TRUE(same(x.exp(), exp(x)));
  EXPECT_TRUE(same(pos.log(), log(pos)));
  EXPECT_TRUE(same(pos.sqrt(), sqrt(pos)));
  EXPECT_TRUE(same(pos.pow(1.5), pow(pos, 1.5)));
  EXPECT_TRUE(same(x.clamp(-0.5, 0.5), clamp(x, -0.5, 0.5)));
  EXPECT_TRUE(same(x.relu(), relu(x)));
  EXPECT_TRUE(same(x.sigmoid(), sigmoid(x)));
  EXPECT_TRUE(same(x.tanh(), tanh(x)));
  EXPECT_TRUE(same(x.matmul(y.transpose(0, 1)), matmul(x, y.transpose(0, 1))));
  EXPECT_TRUE(same(x.sum(), sum(x)));
  EXPECT_TRUE(same(x.sum(1), sum(x, {1})));
  EXPECT_TRUE(same(x.sum(1, true), sum(x, {1}, true)));
  EXPECT_TRUE(same(x.sum({0, 1}), sum(x, {0, 1})));
  EXPECT_TRUE(same(x.mean(), mean(x)));
  EXPECT_TRUE(same(x.mean(0), mean(x, {0})));
  EXPECT_TRUE(same(x.mean({1}, true), mean(x, {1}, true)));
  EXPECT_TRUE(same(x.max(), max(x)));
  EXPECT_TRUE(same(x.min(), min(x)));
  EXPECT_TRUE(same(x.argmax(1), argmax(x, 1)));
  EXPECT_TRUE(same(x.argmax(1, true), argmax(x, 1, true)));
  EXPECT_TRUE(same(x.softmax(1), softmax(x, 1)));
  EXPECT_TRUE(same(x.log_softmax(1), log_softmax(x, 1)));
  EXPECT_TRUE(same(x.eq(y), eq(x, y)));
  EXPECT_TRUE(same(x.eq(0.0), eq(x, 0.0)));
  EXPECT_TRUE(same(x.ne(y), ne(x, y)));
  EXPECT_TRUE(same(x.lt(y), lt(x, y)));
  EXPECT_TRUE(same(x.lt(0.0), lt(x, 0.0)));
  EXPECT_TRUE(same(x.le(y), le(x, y)));
  EXPECT_TRUE(same(x.gt(y), gt(x, y)));
  EXPECT_TRUE(same(x.gt(0.0), gt(x, 0.0)));
  EXPECT_TRUE(same(x.ge(y), ge(x, y)));
}

TEST(TensorMethods, RecordAutograd) {
  Tensor x = Tensor::from_vector<float>({-1, 2, -3, 4}, {2, 2}).set_requires_grad(true);
  x.relu().mul(3.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 3, 0, 3}));
}

TEST(TensorMethods, AccuracyAsLibTorchWritesIt) {
  // dist-mnist's `torch::sum(guess.eq_(op)).item<int64_t>()`.
  Tensor logits = Tensor::from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  Tensor target = Tensor::from_vector<int64_t>({1, 1, 1});
  Tensor guess = logits.argmax(1);
  EXPECT_EQ(guess.dtype(), kLong);
  EXPECT_EQ(sum(guess.eq_(target)).item<int64_t>(), 2);
  EXPECT_EQ(guess.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));  // in place
  Tensor wide = Tensor::zeros({2}, kLong);
  EXPECT_THROW(wide.eq_(Tensor::zeros({3, 2}, kLong)), InvalidArgument);
}

TEST(DTypeAliases, NameLibTorchsDtypes) {
  EXPECT_EQ(kFloat, kFloat32);
  EXPECT_EQ(kF32, kFloat32);
  EXPECT_EQ(kDouble, kFloat64);
  EXPECT_EQ(kF64, kFloat64);
  EXPECT_EQ(kInt, kInt32);
  EXPECT_EQ(kI32, kInt32);
  EXPECT_EQ(kLong, kInt64);
  EXPECT_EQ(kI64, kInt64);
  EXPECT_EQ(kByte, kUInt8);
  EXPECT_EQ(kU8, kUInt8);
  EXPECT_EQ(kHalf, kFloat16);
  EXPECT_EQ(kF16, kFloat16);
}

TEST(FromBlob, SharesBorrowedMemoryBothWays) {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_blob(buf.data(), {2, 3});
  EXPECT_EQ(t.data_ptr<float>(), buf.data());
  EXPECT_TRUE(t.is_contiguous());
  buf[4] = 50;
  EXPECT_EQ(t.to_vector<float>()[4], 50);
  t.mul_(2.0);
  EXPECT_EQ(buf[0], 2);
  Tensor col = Tensor::from_blob(buf.data(), {2}, {3}, kF32);  // column 0 as a strided view
  EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{2, 8}));
}

TEST(FromBlob, CallsTheDeleterOnceWhenTheLastShareGoes) {
  std::vector<double> buf(8, 1.0);
  int calls = 0;
  void* seen = nullptr;
  {
    Tensor t = Tensor::from_blob(buf.data(), {8}, kF64, [&](void* p) {
      ++calls;
      seen = p;
    });
    Tensor v = t.narrow(0, 2, 4);
    t = Tensor();
    EXPECT_EQ(calls, 0);  // the view still shares it
    EXPECT_EQ(v.sum().item<double>(), 4.0);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, buf.data());
}

TEST(FromBlob, RejectsBadArguments) {
  std::vector<float> buf(4);
  EXPECT_THROW(Tensor::from_blob(nullptr, {2}), InvalidArgument);
  EXPECT_NO_THROW(Tensor::from_blob(nullptr, {0, 3}));
  EXPECT_THROW(Tensor::from_blob(buf.data(), {-1}), InvalidArgument);
  EXPECT_THROW(Tensor::from_blob(reinterpret_cast<char*>(buf.data()) + 1, {2}), InvalidArgument);
  EXPECT_THROW(Tensor::from_blob(buf.data(), {2, 2}, {2}, kF32), InvalidArgument);
}

// Borrowed memory has no padding after it: kernels must stay inside the
// viewed elements. The data ends exactly where a PROT_NONE page begins.
TEST(FromBlob, KernelsStayInsideBorrowedMemory) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(map) + page, page, PROT_NONE), 0);
  for (int64_t n : {1, 7, 13, 37, 101}) {
    auto* x = reinterpret_cast<float*>(static_cast<char*>(map) + page) - n;
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 5) - 2.0f;
    Tensor t = Tensor::from_blob(x, {n});
    std::vector<float> v = t.to_vector<float>();
    double s = 0;
    for (float f : v) s += f;
    EXPECT_NEAR(t.sum().item<float>(), s, 1e-4);
    EXPECT_EQ(t.relu().numel(), n);
    EXPECT_EQ(t.add(t).mul(t).exp().numel(), n);
    EXPECT_EQ(t.softmax(0).numel(), n);
    EXPECT_EQ(t.max().item<float>(), n > 2 ? 2.0f : v.back());
    Tensor m = Tensor::from_blob(x, {1, n});
    EXPECT_EQ(m.matmul(m.transpose(0, 1)).numel(), 1);
    t.mul_(1.0);
    t.add_(t);
    t.copy_(Tensor::ones({n}));
  }
  munmap(map, 2 * page);
}

}  // namespace
}  // namespace cohort
