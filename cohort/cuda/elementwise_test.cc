// Parity of native/elementwise.h's ops on cuda:0 with the CPU: every binary,
// compare and unary op with broadcasting and strided operands, the scalar
// forms, clamp, where, axpby and the pointwise gradients. float32 within
// 1e-5 relative (the device's exp/log/tanh/erf are within 2 ulp of glibc's);
// integer, comparison and selection results exactly.
#include "cohort/core/native/elementwise.h"

#include "cohort/cuda/pointwise_testing.h"

namespace cohort::cuda {
namespace {

using native::BinaryOp;
using native::CompareOp;
using native::UnaryOp;
using testing::gpu;
using testing::random_ints;
using testing::random_tensor;
using testing::same_values;

TEST(CudaElementwise, BinaryOpsBroadcastLikeTheCpu) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random_tensor({4, 1, 5}, 1);
  Tensor b = random_tensor({3, 1}, 2, kFloat32, 0.5, 2.0);
  Tensor da = a.to(gpu()), db = b.to(gpu());
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                      BinaryOp::kMaximum, BinaryOp::kMinimum, BinaryOp::kPow}) {
    SCOPED_TRACE(static_cast<int>(op));
    // pow of a negative base to a fractional power is NaN on both.
    EXPECT_TRUE(same_values(native::binary(op, da, db), native::binary(op, a, b)));
    EXPECT_TRUE(same_values(native::binary(op, db, da), native::binary(op, b, a)));
  }
  // Strided operands (a transposed view) and a same-shape pair.
  Tensor m = random_tensor({6, 7}, 3);
  Tensor n = random_tensor({7, 6}, 4);
  EXPECT_TRUE(same_values(native::binary(BinaryOp::kMul, m.to(gpu()), n.to(gpu()).transpose(0, 1)),
                          native::binary(BinaryOp::kMul, m, n.transpose(0, 1))));
  Tensor big = random_tensor({1000, 129}, 5);
  Tensor bias = random_tensor({129}, 6);
  EXPECT_TRUE(same_values(native::binary(BinaryOp::kAdd, big.to(gpu()), bias.to(gpu())),
                          native::binary(BinaryOp::kAdd, big, bias)));
}

TEST(CudaElementwise, IntegerAndMixedDtypes) {
  COHORT_REQUIRE_CUDA();
  Tensor i = random_ints({5, 8}, 7, -50, 50);
  Tensor j = random_ints({8}, 8, 1, 9, kInt32);
  Tensor f = random_tensor({5, 8}, 9);
  for (BinaryOp op :
       {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv, BinaryOp::kMaximum}) {
    SCOPED_TRACE(static_cast<int>(op));
    EXPECT_TRUE(
        same_values(native::binary(op, i.to(gpu()), j.to(gpu())), native::binary(op, i, j), 0, 0));
    EXPECT_TRUE(
        same_values(native::binary(op, i.to(gpu()), f.to(gpu())), native::binary(op, i, f)));
  }
  // uint8 wraps as on the CPU.
  Tensor u = random_ints({64}, 10, 0, 256, kUInt8);
  EXPECT_TRUE(same_values(native::binary(BinaryOp::kAdd, u.to(gpu()), u.to(gpu())),
                          native::binary(BinaryOp::kAdd, u, u), 0, 0));
}

TEST(CudaElementwise, Bfloat16ComputesInFloat) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random_tensor({33, 17}, 11, kBFloat16);
  Tensor b = random_tensor({17}, 12, kBFloat16);
  Tensor g = native::binary(BinaryOp::kMul, a.to(gpu()), b.to(gpu()));
  ASSERT_EQ(g.dtype(), kBFloat16);
  // The CPU has no bfloat16 math: the float product rounded once.
  Tensor h = native::binary(BinaryOp::kMul, a.to(kFloat32), b.to(kFloat32)).to(kBFloat16);
  EXPECT_TRUE(same_values(g, h, 0, 0));
  Tensor gu = native::unary(UnaryOp::kGelu, a.to(gpu()));
  Tensor hu = native::unary(UnaryOp::kGelu, a.to(kFloat32)).to(kBFloat16);
  // One bfloat16 ulp where erf's last float bit decides the rounding.
  EXPECT_TRUE(same_values(gu, hu, 1.0 / 128, 1e-6));
}

TEST(CudaElementwise, ScalarForms) {
  COHORT_REQUIRE_CUDA();
  Tensor a = random_tensor({3, 4, 5}, 13);
  Tensor da = a.to(gpu());
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                      BinaryOp::kMaximum, BinaryOp::kPow}) {
    SCOPED_TRACE(static_cast<int>(op));
    EXPECT_TRUE(same_values(native::binary_scalar(op, da, 0.3), native::binary_scalar(op, a, 0.3)));
    EXPECT_TRUE(
        same_values(native::rbinary_scalar(op, 1.7, da), native::rbinary_scalar(op, 1.7, a)));
  }
  Tensor i = random_ints({10}, 14, -9, 9);
  // Integer / scalar gives float32, integer * integral scalar stays int64.
  EXPECT_TRUE(same_values(native::binary_scalar(BinaryOp::kDiv, i.to(gpu()), 4),
                          native::binary_scalar(BinaryOp::kDiv, i, 4)));
  EXPECT_TRUE(same_values(native::binary_scalar(BinaryOp::kMul, i.to(gpu()), 3),
                          native::binary_scalar(BinaryOp::kMul, i, 3), 0, 0));
  // A 0-d CPU tensor beside a device tensor is a scalar (PyTorch's rule).
  Tensor two = Tensor::scalar(2.0);
  EXPECT_TRUE(
      same_values(native::binary(BinaryOp::kMul, da, two), native::binary(BinaryOp::kMul, a, two)));
  // A full CPU tensor beside a device tensor is an error naming both devices.
  try {
    native::binary(BinaryOp::kAdd, da, a);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST(CudaElementwise, Comparisons) {
  COHORT_REQUIRE_CUDA();
  // Few distinct values so that equality happens.
  Tensor a = random_ints({6, 5}, 15, -3, 3).to(kFloat32);
  Tensor b = random_ints({5}, 16, -3, 3).to(kFloat32);
  Tensor i = random_ints({6, 5}, 17, -3, 3);
  for (CompareOp op : {CompareOp::kEq, CompareOp::kNe, CompareOp::kLt, CompareOp::kLe,
                       CompareOp::kGt, CompareOp::kGe}) {
    SCOPED_TRACE(static_cast<int>(op));
    EXPECT_TRUE(same_values(native::compare(op, a.to(gpu()), b.to(gpu())),
                            native::compare(op, a, b), 0, 0));
    EXPECT_TRUE(same_values(native::compare(op, i.to(gpu()), b.to(gpu())),
                            native::compare(op, i, b), 0, 0));
    EXPECT_TRUE(same_values(native::compare_scalar(op, a.to(gpu()), 1.0),
                            native::compare_scalar(op, a, 1.0), 0, 0));
    EXPECT_TRUE(same_values(native::compare_scalar(op, i.to(gpu()), 0.5),
                            native::compare_scalar(op, i, 0.5), 0, 0));
  }
}

TEST(CudaElementwise, UnaryOps) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({37, 29}, 18, kFloat32, -4, 4);
  Tensor pos = random_tensor({37, 29}, 19, kFloat32, 0.01, 9);
  for (UnaryOp op : {UnaryOp::kNeg, UnaryOp::kExp, UnaryOp::kAbs, UnaryOp::kTanh, UnaryOp::kSigmoid,
                     UnaryOp::kRelu, UnaryOp::kGelu, UnaryOp::kSign}) {
    SCOPED_TRACE(static_cast<int>(op));
    EXPECT_TRUE(same_values(native::unary(op, x.to(gpu())), native::unary(op, x)));
    // Strided input.
    EXPECT_TRUE(same_values(native::unary(op, x.to(gpu()).transpose(0, 1)),
                            native::unary(op, x.transpose(0, 1))));
  }
  for (UnaryOp op : {UnaryOp::kLog, UnaryOp::kSqrt}) {
    SCOPED_TRACE(static_cast<int>(op));
    EXPECT_TRUE(same_values(native::unary(op, pos.to(gpu())), native::unary(op, pos)));
  }
  Tensor d = x.to(kFloat64);
  EXPECT_TRUE(same_values(native::unary(UnaryOp::kTanh, d.to(gpu())),
                          native::unary(UnaryOp::kTanh, d), 1e-12, 1e-15));
  Tensor i = random_ints({40}, 20, -5, 5);
  for (UnaryOp op : {UnaryOp::kNeg, UnaryOp::kAbs, UnaryOp::kRelu, UnaryOp::kSign})
    EXPECT_TRUE(same_values(native::unary(op, i.to(gpu())), native::unary(op, i), 0, 0));
  EXPECT_THROW(native::unary(UnaryOp::kExp, i.to(gpu())), InvalidArgument);
}

TEST(CudaElementwise, ClampWhereAxpby) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({8, 9}, 21);
  Tensor y = random_tensor({9}, 22);
  EXPECT_TRUE(
      same_values(native::clamp(x.to(gpu()), -0.5, 0.7), native::clamp(x, -0.5, 0.7), 0, 0));
  Tensor mask = random_ints({8, 1}, 23, 0, 2, kUInt8);
  EXPECT_TRUE(same_values(native::where(mask.to(gpu()), x.to(gpu()), y.to(gpu())),
                          native::where(mask, x, y), 0, 0));
  // A 0-d CPU scalar as the "else" operand (the masked_fill pattern).
  Tensor ninf = Tensor::scalar(-1e9);
  EXPECT_TRUE(same_values(native::where(mask.to(gpu()), x.to(gpu()), ninf),
                          native::where(mask, x, ninf), 0, 0));
  EXPECT_TRUE(same_values(native::axpby(x.to(gpu()), 0.9, y.to(gpu()), -0.1),
                          native::axpby(x, 0.9, y, -0.1)));
}

TEST(CudaElementwise, PointwiseGradients) {
  COHORT_REQUIRE_CUDA();
  Tensor g = random_tensor({16, 31}, 24);
  Tensor x = random_tensor({16, 31}, 25, kFloat32, -3, 3);
  Tensor dg = g.to(gpu()), dx = x.to(gpu());
  Tensor r = native::unary(UnaryOp::kRelu, x);
  Tensor t = native::unary(UnaryOp::kTanh, x);
  Tensor s = native::unary(UnaryOp::kSigmoid, x);
  EXPECT_TRUE(same_values(native::relu_backward(dg, r.to(gpu())), native::relu_backward(g, r)));
  EXPECT_TRUE(same_values(native::gelu_backward(dg, dx), native::gelu_backward(g, x)));
  EXPECT_TRUE(same_values(native::tanh_backward(dg, t.to(gpu())), native::tanh_backward(g, t)));
  EXPECT_TRUE(
      same_values(native::sigmoid_backward(dg, s.to(gpu())), native::sigmoid_backward(g, s)));
  EXPECT_TRUE(
      same_values(native::clamp_backward(dg, dx, -1, 1), native::clamp_backward(g, x, -1, 1)));
}

}  // namespace
}  // namespace cohort::cuda
