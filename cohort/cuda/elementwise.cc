// native/elementwise.h's ops on a CUDA device: the dtype rules of the CPU
// entry points (promotion, integer division to float32), operands converted
// on the device where their dtypes differ, a new contiguous output, and the
// kernels of elementwise.cu.
#include "cohort/core/native/elementwise.h"

#include <cmath>

#include "cohort/cuda/pointwise_host.h"
#include "cohort/cuda/pointwise_launch.h"
#include "cohort/cuda/pointwise_register.h"

namespace cohort::cuda {
namespace {

using native::BinaryOp;
using native::CompareOp;
using native::UnaryOp;

static_assert(static_cast<int>(BinaryOp::kPow) == static_cast<int>(BinaryKind::kPow) &&
              static_cast<int>(BinaryOp::kMaximum) == static_cast<int>(BinaryKind::kMaximum));
static_assert(static_cast<int>(CompareOp::kGe) == static_cast<int>(CompareKind::kGe) &&
              static_cast<int>(CompareOp::kLt) == static_cast<int>(CompareKind::kLt));
static_assert(static_cast<int>(UnaryOp::kSign) == static_cast<int>(UnaryKind::kSign) &&
              static_cast<int>(UnaryOp::kGelu) == static_cast<int>(UnaryKind::kGelu) &&
              static_cast<int>(UnaryOp::kTanh) == static_cast<int>(UnaryKind::kTanh));

BinaryKind kind(BinaryOp op) { return static_cast<BinaryKind>(op); }
CompareKind kind(CompareOp op) { return static_cast<CompareKind>(op); }

// The CPU's result dtype of a binary op (elementwise.cc's result_dtype).
DType binary_dtype(BinaryOp op, DType a, DType b) {
  DType t = promote_types(a, b);
  if (op == BinaryOp::kDiv && !is_floating(t)) return DType::kFloat32;
  return t;
}

// The CPU's dtype for `a op s` (binary_scalar).
DType scalar_dtype(BinaryOp op, DType a, double s) {
  if (!is_floating(a) && (op == BinaryOp::kDiv || s != std::floor(s))) return DType::kFloat32;
  return a;
}

Tensor cuda_binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  Device d = a_in.is_cpu() ? b_in.device() : a_in.device();
  const Shape shape = broadcast_shapes(a_in.sizes(), b_in.sizes(), "binary");
  const DType dt = binary_dtype(op, a_in.dtype(), b_in.dtype());
  Tensor a = on_device(a_in, d).to(dt), b = on_device(b_in, d).to(dt);
  Tensor out = Tensor::empty(shape, dt, d);
  launch_binary(kind(op), dt, out.device_data(), a.device_data(), b.device_data(),
                plan_over<2>(out, {&a, &b}, "binary"), out.numel(), stream_of(out));
  return out;
}

Tensor scalar_op(BinaryOp op, const Tensor& a_in, double s, bool reverse) {
  const DType dt = scalar_dtype(op, a_in.dtype(), s);
  Tensor a = a_in.to(dt);
  Tensor out = Tensor::empty(a.sizes(), dt, a.device());
  launch_binary_scalar(kind(op), dt, out.device_data(), a.device_data(), s, reverse,
                       plan_over<1>(out, {&a}, "binary_scalar"), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_binary_scalar(BinaryOp op, const Tensor& a, double s) {
  return scalar_op(op, a, s, false);
}

Tensor cuda_rbinary_scalar(BinaryOp op, double s, const Tensor& a) {
  return scalar_op(op, a, s, true);
}

Tensor cuda_compare(CompareOp op, const Tensor& a_in, const Tensor& b_in) {
  Device d = a_in.is_cpu() ? b_in.device() : a_in.device();
  const Shape shape = broadcast_shapes(a_in.sizes(), b_in.sizes(), "compare");
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());
  Tensor a = on_device(a_in, d).to(dt), b = on_device(b_in, d).to(dt);
  Tensor out = Tensor::empty(shape, DType::kUInt8, d);
  launch_compare(kind(op), dt, out.device_ptr<uint8_t>(), a.device_data(), b.device_data(),
                 plan_over<2>(out, {&a, &b}, "compare"), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_compare_scalar(CompareOp op, const Tensor& a, double s) {
  Tensor out = Tensor::empty(a.sizes(), DType::kUInt8, a.device());
  launch_compare_scalar(kind(op), a.dtype(), out.device_ptr<uint8_t>(), a.device_data(), s,
                        plan_over<1>(out, {&a}, "compare_scalar"), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_unary(UnaryOp op, const Tensor& x) {
  const bool any_dtype =
      op == UnaryOp::kNeg || op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kSign;
  COHORT_CHECK(any_dtype || is_floating(x.dtype()), "unary: needs a floating tensor, got {}",
               dtype_name(x.dtype()));
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_unary(static_cast<UnaryKind>(op), x.dtype(), out.device_data(), x.device_data(),
               plan_over<1>(out, {&x}, "unary"), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_clamp(const Tensor& x, double lo, double hi) {
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_clamp(x.dtype(), out.device_data(), x.device_data(), lo, hi,
               plan_over<1>(out, {&x}, "clamp"), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_where(const Tensor& mask_in, const Tensor& a_in, const Tensor& b_in) {
  Device d = !mask_in.is_cpu() ? mask_in.device() : !a_in.is_cpu() ? a_in.device() : b_in.device();
  const Shape shape = broadcast_shapes(broadcast_shapes(mask_in.sizes(), a_in.sizes(), "where"),
                                       b_in.sizes(), "where");
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());
  // The header's contract, nonzero is true, in any mask dtype: compared with
  // zero rather than converted (a conversion to uint8 turns 0.5 or 256 into 0).
  Tensor mask = on_device(mask_in, d);
  if (mask.dtype() != DType::kUInt8) mask = native::compare_scalar(CompareOp::kNe, mask, 0.0);
  Tensor a = on_device(a_in, d).to(dt), b = on_device(b_in, d).to(dt);
  Tensor out = Tensor::empty(shape, dt, d);
  launch_where(dt, out.device_data(), mask.device_ptr<uint8_t>(), a.device_data(), b.device_data(),
               plan_over<3>(out, {&mask, &a, &b}, "where"), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_axpby(const Tensor& a_in, double alpha, const Tensor& b_in, double beta) {
  const Shape shape = broadcast_shapes(a_in.sizes(), b_in.sizes(), "axpby");
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());
  Tensor a = a_in.to(dt), b = b_in.to(dt);
  Tensor out = Tensor::empty(shape, dt, a.device());
  launch_axpby(dt, out.device_data(), a.device_data(), alpha, b.device_data(), beta,
               plan_over<2>(out, {&a, &b}, "axpby"), out.numel(), stream_of(out));
  return out;
}

// grad's shape and dtype; y broadcast to it and converted to its dtype.
Tensor grad_op(GradKind k, const Tensor& grad, const Tensor& y_in, double lo, double hi,
               const char* op) {
  COHORT_CHECK(is_floating(grad.dtype()), "{}: needs a floating gradient, got {}", op,
               dtype_name(grad.dtype()));
  Tensor y = y_in.to(grad.dtype());
  Tensor out = Tensor::empty(grad.sizes(), grad.dtype(), grad.device());
  launch_grad(k, grad.dtype(), out.device_data(), grad.device_data(), y.device_data(), lo, hi,
              plan_over<2>(out, {&grad, &y}, op), out.numel(), stream_of(out));
  return out;
}

Tensor cuda_relu_backward(const Tensor& grad, const Tensor& out) {
  return grad_op(GradKind::kRelu, grad, out, 0, 0, "relu_backward");
}
Tensor cuda_gelu_backward(const Tensor& grad, const Tensor& x) {
  return grad_op(GradKind::kGelu, grad, x, 0, 0, "gelu_backward");
}
Tensor cuda_tanh_backward(const Tensor& grad, const Tensor& out) {
  return grad_op(GradKind::kTanh, grad, out, 0, 0, "tanh_backward");
}
Tensor cuda_sigmoid_backward(const Tensor& grad, const Tensor& out) {
  return grad_op(GradKind::kSigmoid, grad, out, 0, 0, "sigmoid_backward");
}
Tensor cuda_clamp_backward(const Tensor& grad, const Tensor& x, double lo, double hi) {
  return grad_op(GradKind::kClamp, grad, x, lo, hi, "clamp_backward");
}

}  // namespace

void register_elementwise_kernels() {
  constexpr DeviceType kCuda = DeviceType::kCUDA;
  native::binary_device.set(kCuda, &cuda_binary);
  native::binary_scalar_device.set(kCuda, &cuda_binary_scalar);
  native::rbinary_scalar_device.set(kCuda, &cuda_rbinary_scalar);
  native::compare_device.set(kCuda, &cuda_compare);
  native::compare_scalar_device.set(kCuda, &cuda_compare_scalar);
  native::unary_device.set(kCuda, &cuda_unary);
  native::clamp_device.set(kCuda, &cuda_clamp);
  native::where_device.set(kCuda, &cuda_where);
  native::axpby_device.set(kCuda, &cuda_axpby);
  native::relu_backward_device.set(kCuda, &cuda_relu_backward);
  native::gelu_backward_device.set(kCuda, &cuda_gelu_backward);
  native::tanh_backward_device.set(kCuda, &cuda_tanh_backward);
  native::sigmoid_backward_device.set(kCuda, &cuda_sigmoid_backward);
  native::clamp_backward_device.set(kCuda, &cuda_clamp_backward);
}

}  // namespace cohort::cuda
