// In-place math members of Tensor (used by optimizers and gradient
// accumulation). They are not recorded by autograd. On a device they run the
// out-of-place kernel (native/elementwise.h's device entries) and copy the
// result into this view: one temporary, no host access.
#include <cmath>

#include "cohort/core/dispatch.h"
#include "cohort/core/loops.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/tensor.h"

namespace cohort {
namespace {

// Applies f(dst_elem&, src_elem...) over this tensor with the sources
// broadcast to its shape and converted to its dtype.
template <typename T, size_t K, typename F>
void inplace_apply(Tensor& self, const std::array<Tensor, K>& srcs, const char* op, F&& f) {
  std::array<Tensor, K> conv;
  std::array<Shape, K + 1> st;
  st[0] = self.strides();
  for (size_t k = 0; k < K; ++k) {
    Shape b = broadcast_shapes(self.sizes(), srcs[k].sizes(), op);
    COHORT_CHECK(b == self.sizes(), "{}: operand shape {} does not broadcast to {}", op,
                 shape_str(srcs[k].sizes()), shape_str(self.sizes()));
    conv[k] = srcs[k].to(self.dtype());
    st[k + 1] = broadcast_strides(conv[k].sizes(), conv[k].strides(), self.sizes());
  }
  self.storage()->bump_version();
  T* d = self.data_ptr<T>();
  std::array<const T*, K> s;
  for (size_t k = 0; k < K; ++k) s[k] = conv[k].template data_ptr<T>();
  for_each_row<K + 1>(
      self.sizes(), st,
      [&](const std::array<int64_t, K + 1>& off, int64_t n, const std::array<int64_t, K + 1>& is) {
        T* dp = d + off[0];
        if constexpr (K == 1) {
          const T* a = s[0] + off[1];
          if (is[0] == 1 && is[1] == 1) {
            for (int64_t i = 0; i < n; ++i) f(dp[i], a[i]);
          } else {
            for (int64_t i = 0; i < n; ++i) f(dp[i * is[0]], a[i * is[1]]);
          }
        } else {
          const T* a = s[0] + off[1];
          const T* b = s[1] + off[2];
          if (is[0] == 1 && is[1] == 1 && is[2] == 1) {
            for (int64_t i = 0; i < n; ++i) f(dp[i], a[i], b[i]);
          } else {
            for (int64_t i = 0; i < n; ++i) f(dp[i * is[0]], a[i * is[1]], b[i * is[2]]);
          }
        }
      });
}

template <typename T, typename F>
void inplace_unary(Tensor& self, const char* op, F&& f) {
  self.storage()->bump_version();
  T* d = self.data_ptr<T>();
  std::array<Shape, 1> st{self.strides()};
  for_each_row<1>(
      self.sizes(), st,
      [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& is) {
        T* dp = d + off[0];
        if (is[0] == 1) {
          for (int64_t i = 0; i < n; ++i) f(dp[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) f(dp[i * is[0]]);
        }
      });
}

// self <- value (same shape after broadcasting; converted to self's dtype).
Tensor& assign(Tensor& self, const Tensor& value) { return self.copy_(value); }

using native::BinaryOp;

}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (!is_cpu())
    return assign(*this, alpha == 1.0 ? native::binary(BinaryOp::kAdd, *this, other)
                                      : native::axpby(*this, 1.0, other, alpha));
  dispatch_arith(dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    if (alpha == 1.0) {
      inplace_apply<T, 1>(*this, {other}, "add_", [](T& d, T a) { d += a; });
    } else {
      T al = static_cast<T>(alpha);
      inplace_apply<T, 1>(*this, {other}, "add_", [al](T& d, T a) { d += al * a; });
    }
  });
  return *this;
}

Tensor& Tensor::add_(double value) {
  if (!is_cpu()) return assign(*this, native::binary_scalar(BinaryOp::kAdd, *this, value));
  dispatch_arith(dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(value);
    inplace_unary<T>(*this, "add_", [v](T& d) { d += v; });
  });
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  if (!is_cpu()) return assign(*this, native::binary(BinaryOp::kMul, *this, other));
  dispatch_arith(dtype(), "mul_", [&](auto tag) {
    using T = decltype(tag);
    inplace_apply<T, 1>(*this, {other}, "mul_", [](T& d, T a) { d *= a; });
  });
  return *this;
}

Tensor& Tensor::mul_(double value) {
  if (!is_cpu()) return assign(*this, native::binary_scalar(BinaryOp::kMul, *this, value));
  dispatch_arith(dtype(), "mul_", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(value);
    inplace_unary<T>(*this, "mul_", [v](T& d) { d *= v; });
  });
  return *this;
}

Tensor& Tensor::div_(const Tensor& other) {
  if (!is_cpu()) return assign(*this, native::binary(BinaryOp::kDiv, *this, other));
  dispatch_arith(dtype(), "div_", [&](auto tag) {
    using T = decltype(tag);
    inplace_apply<T, 1>(*this, {other}, "div_", [](T& d, T a) { d /= a; });
  });
  return *this;
}

Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, double value) {
  if (!is_cpu())
    return assign(*this, native::axpby(*this, 1.0, native::binary(BinaryOp::kMul, t1, t2), value));
  dispatch_floating(dtype(), "addcmul_", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(value);
    inplace_apply<T, 2>(*this, {t1, t2}, "addcmul_", [v](T& d, T a, T b) { d += v * a * b; });
  });
  return *this;
}

Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, double value) {
  if (!is_cpu())
    return assign(*this, native::axpby(*this, 1.0, native::binary(BinaryOp::kDiv, t1, t2), value));
  dispatch_floating(dtype(), "addcdiv_", [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(value);
    inplace_apply<T, 2>(*this, {t1, t2}, "addcdiv_", [v](T& d, T a, T b) { d += v * a / b; });
  });
  return *this;
}

Tensor& Tensor::sqrt_() {
  if (!is_cpu()) return assign(*this, native::unary(native::UnaryOp::kSqrt, *this));
  dispatch_floating(dtype(), "sqrt_", [&](auto tag) {
    using T = decltype(tag);
    inplace_unary<T>(*this, "sqrt_", [](T& d) { d = std::sqrt(d); });
  });
  return *this;
}

Tensor& Tensor::clamp_(double lo, double hi) {
  if (!is_cpu()) return assign(*this, native::clamp(*this, lo, hi));
  dispatch_arith(dtype(), "clamp_", [&](auto tag) {
    using T = decltype(tag);
    T l = static_cast<T>(lo), h = static_cast<T>(hi);
    inplace_unary<T>(*this, "clamp_", [l, h](T& d) { d = d < l ? l : (d > h ? h : d); });
  });
  return *this;
}

}  // namespace cohort
