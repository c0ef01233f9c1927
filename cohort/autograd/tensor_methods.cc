// Tensor's math members (declared in cohort/core/tensor.h, LibTorch's
// spellings), each forwarding to the free function of ops.h: core cannot
// call autograd, so the members live in this layer, as PyTorch's do in its
// generated TensorBody. Calls are qualified: inside a member, the name alone
// would find the member itself.
#include "cohort/autograd/ops.h"
#include "cohort/core/tensor.h"

namespace cohort {

Tensor Tensor::add(const Tensor& other) const { return cohort::add(*this, other); }
Tensor Tensor::add(double value) const { return cohort::add(*this, value); }
Tensor Tensor::sub(const Tensor& other) const { return cohort::sub(*this, other); }
Tensor Tensor::sub(double value) const { return cohort::sub(*this, value); }
Tensor Tensor::mul(const Tensor& other) const { return cohort::mul(*this, other); }
Tensor Tensor::mul(double value) const { return cohort::mul(*this, value); }
Tensor Tensor::div(const Tensor& other) const { return cohort::div(*this, other); }
Tensor Tensor::div(double value) const { return cohort::div(*this, value); }
Tensor Tensor::neg() const { return cohort::neg(*this); }
Tensor Tensor::abs() const { return cohort::abs(*this); }
Tensor Tensor::exp() const { return cohort::exp(*this); }
Tensor Tensor::log() const { return cohort::log(*this); }
Tensor Tensor::sqrt() const { return cohort::sqrt(*this); }
Tensor Tensor::pow(double exponent) const { return cohort::pow(*this, exponent); }
Tensor Tensor::clamp(double min, double max) const { return cohort::clamp(*this, min, max); }
Tensor Tensor::relu() const { return cohort::relu(*this); }
Tensor Tensor::sigmoid() const { return cohort::sigmoid(*this); }
Tensor Tensor::tanh() const { return cohort::tanh(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return cohort::matmul(*this, other); }
Tensor Tensor::sum() const { return cohort::sum(*this); }
Tensor Tensor::sum(int64_t dim, bool keepdim) const { return cohort::sum(*this, {dim}, keepdim); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return cohort::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return cohort::mean(*this); }
Tensor Tensor::mean(int64_t dim, bool keepdim) const { return cohort::mean(*this, {dim}, keepdim); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return cohort::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return cohort::max(*this); }
Tensor Tensor::min() const { return cohort::min(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return cohort::argmax(*this, dim, keepdim);
}
Tensor Tensor::softmax(int64_t dim) const { return cohort::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return cohort::log_softmax(*this, dim); }
Tensor Tensor::eq(const Tensor& other) const { return cohort::eq(*this, other); }
Tensor Tensor::eq(double value) const { return cohort::eq(*this, value); }
Tensor Tensor::ne(const Tensor& other) const { return cohort::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return cohort::lt(*this, other); }
Tensor Tensor::lt(double value) const { return cohort::lt(*this, value); }
Tensor Tensor::le(const Tensor& other) const { return cohort::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return cohort::gt(*this, other); }
Tensor Tensor::gt(double value) const { return cohort::gt(*this, value); }
Tensor Tensor::ge(const Tensor& other) const { return cohort::ge(*this, other); }

Tensor& Tensor::eq_(const Tensor& other) {
  // The comparison reads both operands before the write, so other may alias this.
  Tensor result = cohort::eq(*this, other);
  COHORT_CHECK(result.sizes() == sizes(),
               "eq_: the comparison broadcasts to {}, not to this tensor's shape {}",
               shape_str(result.sizes()), shape_str(sizes()));
  return copy_(result);
}

}  // namespace cohort
