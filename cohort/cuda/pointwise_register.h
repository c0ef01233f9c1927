// The registration functions of the pointwise area's files, which
// register_pointwise_kernels() (pointwise.cc, kernels.h) calls in turn.
// Thread safety: as register_pointwise_kernels (start-up only).
#pragma once

namespace cohort::cuda {

void register_elementwise_kernels();  // elementwise.cc
void register_reduce_kernels();       // reduce.cc
void register_softmax_kernels();      // softmax.cc (and the NLL loss)
void register_index_kernels();        // index.cc
void register_fused_optim_kernels();  // fused_optim.cc

}  // namespace cohort::cuda
