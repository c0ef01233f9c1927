// The launchers of the pointwise area's CUDA kernels: plain pointers, dtypes,
// StridedPlans and a stream, so that the tensor-level host code (the .cc
// files beside them, built by the C++ compiler, which check arguments and
// allocate) and the kernels (the .cu files, built by nvcc, which cannot parse
// cohort's fmt-based headers) meet here. Every launcher enqueues on `stream`
// and returns at once; a bad launch throws cohort::Error (check.h).
// Pointers are device pointers to the first element of each operand.
// Thread safety: stateless.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cohort/core/dtype.h"
#include "cohort/cuda/strided.h"

namespace cohort::cuda {

// ---- tensor_copy.cu ----
// dst <- src converted (plan: dst, src).
void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                 const StridedPlan<2>& plan, int64_t n, cudaStream_t stream);
// dst <- value in dst's dtype (plan: dst).
void launch_fill(void* dst, DType dtype, double value, const StridedPlan<1>& plan, int64_t n,
                 cudaStream_t stream);

}  // namespace cohort::cuda
