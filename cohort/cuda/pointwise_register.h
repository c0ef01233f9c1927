// The registration functions of the pointwise area's files, which
// register_pointwise_kernels() (pointwise.cc, kernels.h) calls in turn.
// Thread safety: as register_pointwise_kernels (start-up only).
#pragma once

namespace cohort::cuda {

void register_elementwise_kernels();  // elementwise.cc

}  // namespace cohort::cuda
