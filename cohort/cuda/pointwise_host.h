// Host-side helpers of the pointwise area's tensor-level functions (the .cc
// files of cohort/cuda, built by the C++ compiler): the StridedPlan of an
// output and its broadcast inputs, and the stream of a tensor's device.
// Thread safety: stateless.
#pragma once

#include <array>
#include <cstddef>

#include "cohort/core/loops.h"
#include "cohort/core/tensor.h"
#include "cohort/cuda/runtime.h"
#include "cohort/cuda/strided.h"

namespace cohort::cuda {

// The plan of `out` (any strides) and `inputs` broadcast to out's shape.
template <size_t N>
StridedPlan<N + 1> plan_over(const Tensor& out, const std::array<const Tensor*, N>& inputs,
                             const char* op) {
  std::array<Shape, N + 1> st;
  st[0] = out.strides();
  for (size_t k = 0; k < N; ++k)
    st[k + 1] = broadcast_strides(inputs[k]->sizes(), inputs[k]->strides(), out.sizes());
  return make_plan<static_cast<int>(N + 1)>(out.sizes(), st, op);
}

inline cudaStream_t stream_of(const Tensor& t) { return current_cuda_stream(t.device()); }

// t on `device`: a 0-d CPU tensor (a scalar an op allows beside device
// tensors, device_dispatch.h) is copied there; others are already there.
inline Tensor on_device(const Tensor& t, Device device) {
  return t.device() == device ? t : t.to(device);
}

}  // namespace cohort::cuda
