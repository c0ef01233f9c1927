// Kernels of native/elementwise.h's ops on a CUDA device: one grid-stride
// kernel per family over a StridedPlan (broadcasting through zero strides),
// the op chosen by a switch that is uniform across the grid. Each formula is
// the CPU's, term for term, in the same type (float for bfloat16), so float32
// results differ from the CPU's only by the device's libm (exp, log, tanh,
// erf: within 2 ulp).
#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

// 1/sqrt(2), and 1/sqrt(2 pi) as the CPU forms it (0.5 * M_2_SQRTPI * M_SQRT1_2).
constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.5 * 1.12837916709551257390 * 0.70710678118654752440;

template <typename M>
__device__ __forceinline__ M apply_binary(BinaryKind op, M x, M y) {
  switch (op) {
    case BinaryKind::kAdd:
      return x + y;
    case BinaryKind::kSub:
      return x - y;
    case BinaryKind::kMul:
      return x * y;
    case BinaryKind::kDiv:
      return x / y;
    case BinaryKind::kMaximum:
      return x > y || x != x ? x : y;
    case BinaryKind::kMinimum:
      return x < y || x != x ? x : y;
    case BinaryKind::kPow:
      if constexpr (std::is_floating_point_v<M>) {
        return d_pow(x, y);
      } else {
        return static_cast<M>(pow(static_cast<double>(x), static_cast<double>(y)));
      }
  }
  return x;
}

template <typename M>
__device__ __forceinline__ uint8_t apply_compare(CompareKind op, M x, M y) {
  switch (op) {
    case CompareKind::kEq:
      return x == y;
    case CompareKind::kNe:
      return x != y;
    case CompareKind::kLt:
      return x < y;
    case CompareKind::kLe:
      return x <= y;
    case CompareKind::kGt:
      return x > y;
    case CompareKind::kGe:
      return x >= y;
  }
  return 0;
}

template <typename M>
__device__ __forceinline__ M apply_unary(UnaryKind op, M v) {
  switch (op) {
    case UnaryKind::kNeg:
      return static_cast<M>(-v);
    case UnaryKind::kAbs:
      if constexpr (std::is_unsigned_v<M>) {
        return v;
      } else {
        return v < M(0) ? static_cast<M>(-v) : v;
      }
    case UnaryKind::kRelu:
      return v > M(0) ? v : M(0);
    case UnaryKind::kSign:
      if constexpr (std::is_unsigned_v<M>) {
        return static_cast<M>(M(0) < v);
      } else {
        return static_cast<M>((M(0) < v) - (v < M(0)));
      }
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<M>) {
    switch (op) {
      case UnaryKind::kExp:
        return d_exp(v);
      case UnaryKind::kLog:
        return d_log(v);
      case UnaryKind::kSqrt:
        return d_sqrt(v);
      case UnaryKind::kTanh:
        return d_tanh(v);
      case UnaryKind::kSigmoid:
        return M(1) / (M(1) + d_exp(-v));
      case UnaryKind::kGelu:
        return M(0.5) * v * (M(1) + d_erf(v * static_cast<M>(kSqrtHalf)));
      default:
        break;
    }
  }
  return v;
}

template <typename T>
struct BinaryFn {
  BinaryKind op;
  T* out;
  const T* a;
  const T* b;
  __device__ void operator()(const int64_t (&o)[3]) const {
    using M = MathOf<T>;
    out[o[0]] = convert<T>(apply_binary<M>(op, convert<M>(a[o[1]]), convert<M>(b[o[2]])));
  }
};

template <typename T>
struct BinaryScalarFn {
  BinaryKind op;
  T* out;
  const T* a;
  MathOf<T> s;
  bool reverse;
  __device__ void operator()(const int64_t (&o)[2]) const {
    using M = MathOf<T>;
    const M x = convert<M>(a[o[1]]);
    out[o[0]] = convert<T>(reverse ? apply_binary<M>(op, s, x) : apply_binary<M>(op, x, s));
  }
};

template <typename T>
struct CompareFn {
  CompareKind op;
  uint8_t* out;
  const T* a;
  const T* b;
  __device__ void operator()(const int64_t (&o)[3]) const {
    using M = MathOf<T>;
    out[o[0]] = apply_compare<M>(op, convert<M>(a[o[1]]), convert<M>(b[o[2]]));
  }
};

// C: the type the comparison runs in.
template <typename T, typename C>
struct CompareScalarFn {
  CompareKind op;
  uint8_t* out;
  const T* a;
  C s;
  __device__ void operator()(const int64_t (&o)[2]) const {
    out[o[0]] = apply_compare<C>(op, convert<C>(a[o[1]]), s);
  }
};

template <typename T>
struct UnaryFn {
  UnaryKind op;
  T* out;
  const T* x;
  __device__ void operator()(const int64_t (&o)[2]) const {
    using M = MathOf<T>;
    out[o[0]] = convert<T>(apply_unary<M>(op, convert<M>(x[o[1]])));
  }
};

template <typename T>
struct ClampFn {
  T* out;
  const T* x;
  MathOf<T> lo, hi;
  __device__ void operator()(const int64_t (&o)[2]) const {
    using M = MathOf<T>;
    const M v = convert<M>(x[o[1]]);
    out[o[0]] = convert<T>(v < lo ? lo : (v > hi ? hi : v));
  }
};

template <typename T>
struct WhereFn {
  T* out;
  const uint8_t* mask;
  const T* a;
  const T* b;
  __device__ void operator()(const int64_t (&o)[4]) const {
    out[o[0]] = mask[o[1]] ? a[o[2]] : b[o[3]];
  }
};

template <typename T>
struct AxpbyFn {
  T* out;
  const T* a;
  const T* b;
  MathOf<T> alpha, beta;
  __device__ void operator()(const int64_t (&o)[3]) const {
    using M = MathOf<T>;
    out[o[0]] = convert<T>(alpha * convert<M>(a[o[1]]) + beta * convert<M>(b[o[2]]));
  }
};

template <typename T>
struct GradFn {
  GradKind kind;
  T* out;
  const T* grad;
  const T* y;
  MathOf<T> lo, hi;
  __device__ void operator()(const int64_t (&o)[3]) const {
    using M = MathOf<T>;
    const M g = convert<M>(grad[o[1]]);
    const M v = convert<M>(y[o[2]]);
    M r;
    switch (kind) {
      case GradKind::kRelu:
        r = v > M(0) ? g : M(0);
        break;
      case GradKind::kGelu: {
        const M cdf = M(0.5) * (M(1) + d_erf(v * static_cast<M>(kSqrtHalf)));
        const M pdf = d_exp(M(-0.5) * v * v) * static_cast<M>(kInvSqrt2Pi);
        r = g * (cdf + v * pdf);
        break;
      }
      case GradKind::kTanh:
        r = g * (M(1) - v * v);
        break;
      case GradKind::kSigmoid:
        r = g * v * (M(1) - v);
        break;
      case GradKind::kClamp:
      default:
        r = v >= lo && v <= hi ? g : M(0);
        break;
    }
    out[o[0]] = convert<T>(r);
  }
};

// The CPU's static_cast<T>(double) for T's arithmetic type.
template <typename T>
MathOf<T> math_cast(double v) {
  return static_cast<MathOf<T>>(v);
}

}  // namespace

void launch_binary(BinaryKind op, DType dtype, void* out, const void* a, const void* b,
                   const StridedPlan<3>& plan, int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<3>(
        plan, n, stream,
        BinaryFn<T>{op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b)});
  });
}

void launch_binary_scalar(BinaryKind op, DType dtype, void* out, const void* a, double s,
                          bool reverse, const StridedPlan<2>& plan, int64_t n,
                          cudaStream_t stream) {
  dispatch_arith_types(dtype, "binary_scalar", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<2>(plan, n, stream,
                      BinaryScalarFn<T>{op, static_cast<T*>(out), static_cast<const T*>(a),
                                        math_cast<T>(s), reverse});
  });
}

void launch_compare(CompareKind op, DType dtype, uint8_t* out, const void* a, const void* b,
                    const StridedPlan<3>& plan, int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<3>(plan, n, stream,
                      CompareFn<T>{op, out, static_cast<const T*>(a), static_cast<const T*>(b)});
  });
}

void launch_compare_scalar(CompareKind op, DType dtype, uint8_t* out, const void* a, double s,
                           const StridedPlan<2>& plan, int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "compare_scalar", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_integral_v<T>, double, MathOf<T>>;
    launch_strided<2>(plan, n, stream,
                      CompareScalarFn<T, C>{op, out, static_cast<const T*>(a), static_cast<C>(s)});
  });
}

void launch_unary(UnaryKind op, DType dtype, void* out, const void* x, const StridedPlan<2>& plan,
                  int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<2>(plan, n, stream,
                      UnaryFn<T>{op, static_cast<T*>(out), static_cast<const T*>(x)});
  });
}

void launch_clamp(DType dtype, void* out, const void* x, double lo, double hi,
                  const StridedPlan<2>& plan, int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "clamp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<2>(plan, n, stream,
                      ClampFn<T>{static_cast<T*>(out), static_cast<const T*>(x), math_cast<T>(lo),
                                 math_cast<T>(hi)});
  });
}

void launch_where(DType dtype, void* out, const uint8_t* mask, const void* a, const void* b,
                  const StridedPlan<4>& plan, int64_t n, cudaStream_t stream) {
  dispatch_arith_types(dtype, "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<4>(
        plan, n, stream,
        WhereFn<T>{static_cast<T*>(out), mask, static_cast<const T*>(a), static_cast<const T*>(b)});
  });
}

void launch_axpby(DType dtype, void* out, const void* a, double alpha, const void* b, double beta,
                  const StridedPlan<3>& plan, int64_t n, cudaStream_t stream) {
  dispatch_float_types(dtype, "axpby", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<3>(
        plan, n, stream,
        AxpbyFn<T>{static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
                   math_cast<T>(alpha), math_cast<T>(beta)});
  });
}

void launch_grad(GradKind kind, DType dtype, void* out, const void* grad, const void* y, double lo,
                 double hi, const StridedPlan<3>& plan, int64_t n, cudaStream_t stream) {
  dispatch_float_types(dtype, "pointwise backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<3>(plan, n, stream,
                      GradFn<T>{kind, static_cast<T*>(out), static_cast<const T*>(grad),
                                static_cast<const T*>(y), math_cast<T>(lo), math_cast<T>(hi)});
  });
}

}  // namespace cohort::cuda
