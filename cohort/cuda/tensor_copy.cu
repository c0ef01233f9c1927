// Kernels behind Tensor::copy_ and fill_ on a CUDA device: strided,
// broadcasting, dtype-converting copy, and fill.
#include <cmath>

#include "cohort/cuda/device_types.cuh"
#include "cohort/cuda/pointwise_launch.h"

namespace cohort::cuda {
namespace {

template <typename D, typename S>
struct CopyOp {
  D* dst;
  const S* src;
  __device__ void operator()(const int64_t (&off)[2]) const {
    dst[off[0]] = convert<D>(src[off[1]]);
  }
};

template <typename T>
struct FillOp {
  T* dst;
  T value;
  __device__ void operator()(const int64_t (&off)[1]) const { dst[off[0]] = value; }
};

// The CPU's cast_value<T>(double) on the host (the value is converted once).
template <typename T>
T host_cast(double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace

void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                 const StridedPlan<2>& plan, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (dst_dtype == src_dtype && plan_is_dense(plan)) {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype),
                                      cudaMemcpyDeviceToDevice, stream));
    return;
  }
  dispatch_all_types(dst_dtype, "copy_", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_all_types(src_dtype, "copy_", [&](auto stag) {
      using S = typename decltype(stag)::type;
      launch_strided<2>(plan, n, stream,
                        CopyOp<D, S>{static_cast<D*>(dst), static_cast<const S*>(src)});
    });
  });
}

void launch_fill(void* dst, DType dtype, double value, const StridedPlan<1>& plan, int64_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  if (value == 0.0 && !std::signbit(value) && plan_is_dense(plan)) {
    // Zero is all-zero bytes in every dtype.
    COHORT_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * dtype_size(dtype), stream));
    return;
  }
  dispatch_all_types(dtype, "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_strided<1>(plan, n, stream, FillOp<T>{static_cast<T*>(dst), host_cast<T>(value)});
  });
}

}  // namespace cohort::cuda
