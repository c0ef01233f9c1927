#include "cohort/core/native/elementwise.h"

#include <cmath>

#include "cohort/core/dispatch.h"
#include "cohort/core/loops.h"
#include "cohort/core/native/vec_kernels.h"

namespace cohort::native {
namespace {

constexpr int64_t kGrain = 32768;

// out[i] = f(a[i], b[i]) with a, b broadcast to out's (contiguous) shape.
template <typename O, typename A, typename B, typename F>
void map2(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const A* pa = a.data_ptr<A>();
  const B* pb = b.data_ptr<B>();
  O* po = out.data_ptr<O>();
  const int64_t n = out.numel();
  const bool a_flat = a.is_contiguous() && a.numel() == n;
  const bool b_flat = b.is_contiguous() && b.numel() == n;
  if (a_flat && b_flat) {
    parallel_for(0, n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  if (a_flat && b.numel() == 1) {
    const B v = *pb;
    parallel_for(0, n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(pa[i], v);
    });
    return;
  }
  if (b_flat && a.numel() == 1) {
    const A v = *pa;
    parallel_for(0, n, kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(v, pb[i]);
    });
    return;
  }
  std::array<Shape, 3> st{out.strides(), broadcast_strides(a.sizes(), a.strides(), out.sizes()),
                          broadcast_strides(b.sizes(), b.strides(), out.sizes())};
  for_each_row<3>(
      out.sizes(), st,
      [&](const std::array<int64_t, 3>& off, int64_t len, const std::array<int64_t, 3>& is) {
        O* o = po + off[0];
        const A* x = pa + off[1];
        const B* y = pb + off[2];
        if (is[1] == 1 && is[2] == 1) {
          for (int64_t i = 0; i < len; ++i) o[i] = f(x[i], y[i]);
        } else if (is[1] == 1 && is[2] == 0) {
          const B v = *y;
          for (int64_t i = 0; i < len; ++i) o[i] = f(x[i], v);
        } else {
          for (int64_t i = 0; i < len; ++i) o[i] = f(x[i * is[1]], y[i * is[2]]);
        }
      });
}

// out[i] = f(x[i]) over x's shape.
template <typename O, typename X, typename F>
Tensor map1(const Tensor& x, DType out_dtype, F f) {
  Tensor out = Tensor::empty(x.sizes(), out_dtype);
  const X* px = x.data_ptr<X>();
  O* po = out.data_ptr<O>();
  if (x.is_contiguous()) {
    parallel_for(0, x.numel(), kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = f(px[i]);
    });
    return out;
  }
  std::array<Shape, 2> st{out.strides(), x.strides()};
  for_each_row<2>(
      out.sizes(), st,
      [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& is) {
        for (int64_t i = 0; i < len; ++i) po[off[0] + i] = f(px[off[1] + i * is[1]]);
      });
  return out;
}

// The contiguous float32 cases of map2 and map1 through the kernel path's
// vector loops (vec_kernels.h), which give the same values; false where
// there is none (baseline path, other dtypes, strided or broadcast operands):
// then the generic loops run.
static_assert(static_cast<int>(BinaryOp::kMinimum) + 1 == kVecBinaryOps &&
              static_cast<int>(BinaryOp::kPow) == kVecBinaryOps);

bool vec_map2(const VecKernels::Binary* forms, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = out.numel();
  const bool a_flat = a.is_contiguous() && a.numel() == n;
  const bool b_flat = b.is_contiguous() && b.numel() == n;
  VecForm form;
  if (a_flat && b_flat)
    form = VecForm::kVectors;
  else if (a_flat && b.numel() == 1)
    form = VecForm::kScalarB;
  else if (b_flat && a.numel() == 1)
    form = VecForm::kScalarA;
  else
    return false;
  const VecKernels::Binary f = forms[static_cast<int>(form)];
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
  parallel_for(0, n, kGrain, [&](int64_t s, int64_t e) {
    f(form == VecForm::kScalarA ? pa : pa + s, form == VecForm::kScalarB ? pb : pb + s, po + s,
      e - s);
  });
  return true;
}

Tensor vec_map1(void (*f)(const float*, float*, int64_t), const Tensor& x) {
  Tensor out = Tensor::empty(x.sizes(), DType::kFloat32);
  const float* px = x.data_ptr<float>();
  float* po = out.data_ptr<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t s, int64_t e) { f(px + s, po + s, e - s); });
  return out;
}

DType result_dtype(BinaryOp op, DType a, DType b) {
  DType t = promote_types(a, b);
  if (op == BinaryOp::kDiv && !is_floating(t)) return DType::kFloat32;
  return t;
}

// Dispatch on op with the functor inlined in the loop (a function pointer
// would block vectorisation of add/mul).
template <typename T, typename G>
void with_binary(BinaryOp op, G&& g) {
  switch (op) {
    case BinaryOp::kAdd:
      return g([](T x, T y) -> T { return x + y; });
    case BinaryOp::kSub:
      return g([](T x, T y) -> T { return x - y; });
    case BinaryOp::kMul:
      return g([](T x, T y) -> T { return x * y; });
    case BinaryOp::kDiv:
      return g([](T x, T y) -> T { return x / y; });
    case BinaryOp::kMaximum:
      return g([](T x, T y) -> T { return x > y || x != x ? x : y; });
    case BinaryOp::kMinimum:
      return g([](T x, T y) -> T { return x < y || x != x ? x : y; });
    case BinaryOp::kPow:
      return g([](T x, T y) -> T { return static_cast<T>(std::pow(x, y)); });
  }
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
    case BinaryOp::kMaximum:
      return "maximum";
    case BinaryOp::kMinimum:
      return "minimum";
    case BinaryOp::kPow:
      return "pow";
  }
  return "binary";
}

}  // namespace

DeviceOp<Tensor(BinaryOp, const Tensor&, const Tensor&)> binary_device("binary");
DeviceOp<Tensor(BinaryOp, const Tensor&, double)> binary_scalar_device("binary_scalar");
DeviceOp<Tensor(BinaryOp, double, const Tensor&)> rbinary_scalar_device("rbinary_scalar");
DeviceOp<Tensor(CompareOp, const Tensor&, const Tensor&)> compare_device("compare");
DeviceOp<Tensor(CompareOp, const Tensor&, double)> compare_scalar_device("compare_scalar");
DeviceOp<Tensor(UnaryOp, const Tensor&)> unary_device("unary");
DeviceOp<Tensor(const Tensor&, double, double)> clamp_device("clamp");
DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&)> where_device("where");
DeviceOp<Tensor(const Tensor&, double, const Tensor&, double)> axpby_device("axpby");
DeviceOp<Tensor(const Tensor&, const Tensor&)> relu_backward_device("relu_backward");
DeviceOp<Tensor(const Tensor&, const Tensor&)> gelu_backward_device("gelu_backward");
DeviceOp<Tensor(const Tensor&, const Tensor&)> tanh_backward_device("tanh_backward");
DeviceOp<Tensor(const Tensor&, const Tensor&)> sigmoid_backward_device("sigmoid_backward");
DeviceOp<Tensor(const Tensor&, const Tensor&, double, double)> clamp_backward_device(
    "clamp_backward");

Tensor binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  const char* name = binary_name(op);
  if (Device d = op_device(name, {&a_in, &b_in}, true); !d.is_cpu())
    return binary_device(d, op, a_in, b_in);
  Shape shape = broadcast_shapes(a_in.sizes(), b_in.sizes(), name);
  DType dt = result_dtype(op, a_in.dtype(), b_in.dtype());
  Tensor a = a_in.to(dt), b = b_in.to(dt);
  Tensor out = Tensor::empty(shape, dt);
  const VecKernels* vec = dt == DType::kFloat32 ? vec_kernels() : nullptr;
  if (vec != nullptr && op != BinaryOp::kPow &&
      vec_map2(vec->binary[static_cast<int>(op)], a, b, out))
    return out;
  dispatch_arith(dt, name, [&](auto tag) {
    using T = decltype(tag);
    with_binary<T>(op, [&](auto f) { map2<T, T, T>(a, b, out, f); });
  });
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s) {
  if (!a.is_cpu()) return binary_scalar_device(a.device(), op, a, s);
  DType dt = a.dtype();
  if (!is_floating(dt) && (op == BinaryOp::kDiv || s != std::floor(s))) dt = DType::kFloat32;
  return binary(op, a.to(dt), Tensor::scalar(s, dt));
}

Tensor rbinary_scalar(BinaryOp op, double s, const Tensor& a) {
  if (!a.is_cpu()) return rbinary_scalar_device(a.device(), op, s, a);
  DType dt = a.dtype();
  if (!is_floating(dt) && (op == BinaryOp::kDiv || s != std::floor(s))) dt = DType::kFloat32;
  return binary(op, Tensor::scalar(s, dt), a.to(dt));
}

Tensor compare(CompareOp op, const Tensor& a_in, const Tensor& b_in) {
  if (Device d = op_device("compare", {&a_in, &b_in}, true); !d.is_cpu())
    return compare_device(d, op, a_in, b_in);
  Shape shape = broadcast_shapes(a_in.sizes(), b_in.sizes(), "compare");
  DType dt = promote_types(a_in.dtype(), b_in.dtype());
  Tensor a = a_in.to(dt), b = b_in.to(dt);
  Tensor out = Tensor::empty(shape, DType::kUInt8);
  dispatch_arith(dt, "compare", [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto f) { map2<uint8_t, T, T>(a, b, out, f); };
    switch (op) {
      case CompareOp::kEq:
        return run([](T x, T y) -> uint8_t { return x == y; });
      case CompareOp::kNe:
        return run([](T x, T y) -> uint8_t { return x != y; });
      case CompareOp::kLt:
        return run([](T x, T y) -> uint8_t { return x < y; });
      case CompareOp::kLe:
        return run([](T x, T y) -> uint8_t { return x <= y; });
      case CompareOp::kGt:
        return run([](T x, T y) -> uint8_t { return x > y; });
      case CompareOp::kGe:
        return run([](T x, T y) -> uint8_t { return x >= y; });
    }
  });
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  if (!a.is_cpu()) return compare_scalar_device(a.device(), op, a, s);
  DType dt = is_floating(a.dtype()) ? a.dtype() : DType::kFloat64;
  return compare(op, a, Tensor::scalar(s, dt));
}

double gelu_value(double x) { return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2)); }

double gelu_derivative(double x) {
  const double cdf = 0.5 * (1.0 + std::erf(x * M_SQRT1_2));
  const double pdf = std::exp(-0.5 * x * x) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
  return cdf + x * pdf;
}

Tensor unary(UnaryOp op, const Tensor& x) {
  if (!x.is_cpu()) return unary_device(x.device(), op, x);
  if (op == UnaryOp::kNeg || op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kSign) {
    const VecKernels* vec =
        x.dtype() == DType::kFloat32 && x.is_contiguous() ? vec_kernels() : nullptr;
    if (vec != nullptr && op != UnaryOp::kSign)
      return vec_map1(op == UnaryOp::kNeg   ? vec->neg
                      : op == UnaryOp::kAbs ? vec->abs
                                            : vec->relu,
                      x);
    return dispatch_arith(x.dtype(), "unary", [&](auto tag) {
      using T = decltype(tag);
      switch (op) {
        case UnaryOp::kNeg:
          return map1<T, T>(x, x.dtype(), [](T v) -> T { return static_cast<T>(-v); });
        case UnaryOp::kAbs:
          return map1<T, T>(x, x.dtype(), [](T v) -> T { return v < T(0) ? T(-v) : v; });
        case UnaryOp::kRelu:
          return map1<T, T>(x, x.dtype(), [](T v) -> T { return v > T(0) ? v : T(0); });
        default:
          return map1<T, T>(x, x.dtype(),
                            [](T v) -> T { return static_cast<T>((T(0) < v) - (v < T(0))); });
      }
    });
  }
  return dispatch_floating(x.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case UnaryOp::kExp:
        return map1<T, T>(x, x.dtype(), [](T v) -> T { return std::exp(v); });
      case UnaryOp::kLog:
        return map1<T, T>(x, x.dtype(), [](T v) -> T { return std::log(v); });
      case UnaryOp::kSqrt:
        return map1<T, T>(x, x.dtype(), [](T v) -> T { return std::sqrt(v); });
      case UnaryOp::kTanh:
        return map1<T, T>(x, x.dtype(), [](T v) -> T { return std::tanh(v); });
      case UnaryOp::kSigmoid:
        return map1<T, T>(x, x.dtype(), [](T v) -> T { return T(1) / (T(1) + std::exp(-v)); });
      case UnaryOp::kGelu:
        return map1<T, T>(x, x.dtype(), [](T v) -> T {
          return T(0.5) * v * (T(1) + std::erf(v * static_cast<T>(M_SQRT1_2)));
        });
      default:
        throw InvalidArgument("unary: bad op");
    }
  });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  if (!x.is_cpu()) return clamp_device(x.device(), x, lo, hi);
  return dispatch_arith(x.dtype(), "clamp", [&](auto tag) {
    using T = decltype(tag);
    T l = static_cast<T>(lo), h = static_cast<T>(hi);
    return map1<T, T>(x, x.dtype(), [l, h](T v) -> T { return v < l ? l : (v > h ? h : v); });
  });
}

Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b) {
  if (Device d = op_device("where", {&mask, &a, &b}, true); !d.is_cpu())
    return where_device(d, mask, a, b);
  Shape shape =
      broadcast_shapes(broadcast_shapes(mask.sizes(), a.sizes(), "where"), b.sizes(), "where");
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor m = mask.to(DType::kUInt8).expand(shape).contiguous();
  Tensor out = Tensor::empty(shape, dt);
  // out = a where m, then overwrite with b where !m: two broadcast passes.
  dispatch_arith(dt, "where", [&](auto tag) {
    using T = decltype(tag);
    Tensor ta = a.to(dt).expand(shape).contiguous(), tb = b.to(dt).expand(shape).contiguous();
    const uint8_t* pm = m.data_ptr<uint8_t>();
    const T* pa = ta.data_ptr<T>();
    const T* pb = tb.data_ptr<T>();
    T* po = out.data_ptr<T>();
    parallel_for(0, out.numel(), kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = pm[i] ? pa[i] : pb[i];
    });
  });
  return out;
}

Tensor axpby(const Tensor& a, double alpha, const Tensor& b, double beta) {
  if (Device d = op_device("axpby", {&a, &b}); !d.is_cpu())
    return axpby_device(d, a, alpha, b, beta);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), "axpby");
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor out = Tensor::empty(shape, dt);
  dispatch_floating(dt, "axpby", [&](auto tag) {
    using T = decltype(tag);
    T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    map2<T, T, T>(a.to(dt), b.to(dt), out, [al, be](T x, T y) -> T { return al * x + be * y; });
  });
  return out;
}

Tensor relu_backward(const Tensor& grad, const Tensor& out) {
  if (Device d = op_device("relu_backward", {&grad, &out}); !d.is_cpu())
    return relu_backward_device(d, grad, out);
  Tensor r = Tensor::empty(grad.sizes(), grad.dtype());
  Tensor y = out.to(grad.dtype());
  const VecKernels* vec = grad.dtype() == DType::kFloat32 ? vec_kernels() : nullptr;
  if (vec != nullptr && grad.is_contiguous() && y.is_contiguous() && y.numel() == r.numel()) {
    const float* pg = grad.data_ptr<float>();
    const float* py = y.data_ptr<float>();
    float* pr = r.data_ptr<float>();
    parallel_for(0, r.numel(), kGrain,
                 [&](int64_t s, int64_t e) { vec->relu_backward(pg + s, py + s, pr + s, e - s); });
    return r;
  }
  dispatch_floating(grad.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(grad, y, r, [](T g, T v) -> T { return v > T(0) ? g : T(0); });
  });
  return r;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x) {
  if (Device d = op_device("gelu_backward", {&grad, &x}); !d.is_cpu())
    return gelu_backward_device(d, grad, x);
  Tensor r = Tensor::empty(grad.sizes(), grad.dtype());
  dispatch_floating(grad.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(grad, x, r, [](T g, T v) -> T {
      const T cdf = T(0.5) * (T(1) + std::erf(v * static_cast<T>(M_SQRT1_2)));
      const T pdf = std::exp(T(-0.5) * v * v) * static_cast<T>(0.5 * M_2_SQRTPI * M_SQRT1_2);
      return g * (cdf + v * pdf);
    });
  });
  return r;
}

Tensor tanh_backward(const Tensor& grad, const Tensor& out) {
  if (Device d = op_device("tanh_backward", {&grad, &out}); !d.is_cpu())
    return tanh_backward_device(d, grad, out);
  Tensor r = Tensor::empty(grad.sizes(), grad.dtype());
  dispatch_floating(grad.dtype(), "tanh_backward", [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(grad, out, r, [](T g, T y) -> T { return g * (T(1) - y * y); });
  });
  return r;
}

Tensor sigmoid_backward(const Tensor& grad, const Tensor& out) {
  if (Device d = op_device("sigmoid_backward", {&grad, &out}); !d.is_cpu())
    return sigmoid_backward_device(d, grad, out);
  Tensor r = Tensor::empty(grad.sizes(), grad.dtype());
  dispatch_floating(grad.dtype(), "sigmoid_backward", [&](auto tag) {
    using T = decltype(tag);
    map2<T, T, T>(grad, out, r, [](T g, T y) -> T { return g * y * (T(1) - y); });
  });
  return r;
}

Tensor clamp_backward(const Tensor& grad, const Tensor& x, double lo, double hi) {
  if (Device d = op_device("clamp_backward", {&grad, &x}); !d.is_cpu())
    return clamp_backward_device(d, grad, x, lo, hi);
  Tensor r = Tensor::empty(grad.sizes(), grad.dtype());
  dispatch_floating(grad.dtype(), "clamp_backward", [&](auto tag) {
    using T = decltype(tag);
    T l = static_cast<T>(lo), h = static_cast<T>(hi);
    map2<T, T, T>(grad, x.to(grad.dtype()), r,
                  [l, h](T g, T v) -> T { return v >= l && v <= h ? g : T(0); });
  });
  return r;
}

}  // namespace cohort::native
