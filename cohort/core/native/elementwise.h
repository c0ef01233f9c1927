// Elementwise kernels (not recorded by autograd; cohort/autograd/ops.h wraps
// them). Binary ops broadcast NumPy-style and promote dtypes (float64 >
// float32 > int64 > int32 > uint8; integer division gives float32). Results
// are new contiguous tensors. Work is split with cohort::parallel_for under
// the calling thread's budget. Thread safe (no shared state).
// The oracle for tests is the scalar formula applied per element (see
// elementwise_test.cc); the contiguous fast paths are plain loops the
// compiler vectorises, and on the avx2 / avx512 kernel paths the float32 ones
// (add, sub, mul, div, maximum, minimum, neg, abs, relu, relu_backward) run
// the per-ISA copies of vec_kernels.h, with the same results.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };
enum class UnaryOp { kNeg, kExp, kLog, kSqrt, kAbs, kTanh, kSigmoid, kRelu, kGelu, kSign };

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s);   // a op s
Tensor rbinary_scalar(BinaryOp op, double s, const Tensor& a);  // s op a
// uint8 masks (1 true, 0 false).
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor unary(UnaryOp op, const Tensor& x);  // floating dtypes (neg/abs/relu/sign: any)
Tensor clamp(const Tensor& x, double lo, double hi);
// mask (uint8, any nonzero = true) ? a : b, all broadcast together.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);
// a * alpha + b * beta (same shape, fused; used for gradient sums).
Tensor axpby(const Tensor& a, double alpha, const Tensor& b, double beta);

// Backward helpers: gradient of the input given the output gradient.
Tensor relu_backward(const Tensor& grad, const Tensor& out);     // grad * (out > 0)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);       // erf form
Tensor tanh_backward(const Tensor& grad, const Tensor& out);     // grad * (1 - out^2)
Tensor sigmoid_backward(const Tensor& grad, const Tensor& out);  // grad * out * (1 - out)
// grad where lo <= x <= hi, else 0.
Tensor clamp_backward(const Tensor& grad, const Tensor& x, double lo, double hi);

// Device kernels of the ops above (device_dispatch.h): the entry points
// forward to them when their tensors are on a device. binary, compare and
// where also accept a 0-d CPU tensor beside device tensors (a scalar).
extern DeviceOp<Tensor(BinaryOp, const Tensor&, const Tensor&)> binary_device;
extern DeviceOp<Tensor(BinaryOp, const Tensor&, double)> binary_scalar_device;
extern DeviceOp<Tensor(BinaryOp, double, const Tensor&)> rbinary_scalar_device;
extern DeviceOp<Tensor(CompareOp, const Tensor&, const Tensor&)> compare_device;
extern DeviceOp<Tensor(CompareOp, const Tensor&, double)> compare_scalar_device;
extern DeviceOp<Tensor(UnaryOp, const Tensor&)> unary_device;
extern DeviceOp<Tensor(const Tensor&, double, double)> clamp_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&)> where_device;
extern DeviceOp<Tensor(const Tensor&, double, const Tensor&, double)> axpby_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&)> relu_backward_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&)> gelu_backward_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&)> tanh_backward_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&)> sigmoid_backward_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&, double, double)> clamp_backward_device;

// The scalar formulas (exposed so tests and reference loops share them).
double gelu_value(double x);
double gelu_derivative(double x);

}  // namespace cohort::native
