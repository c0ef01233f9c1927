// register_pointwise_kernels(): every table entry of the pointwise area
// (elementwise, reductions, softmax and losses, index ops, fused optimizer
// updates), one registration function per file.
#include "cohort/cuda/kernels.h"
#include "cohort/cuda/pointwise_register.h"

namespace cohort::cuda {

void register_pointwise_kernels() {
  register_elementwise_kernels();
  register_reduce_kernels();
  register_softmax_kernels();
  register_index_kernels();
  register_fused_optim_kernels();
}

}  // namespace cohort::cuda
