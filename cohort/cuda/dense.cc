// register_dense_kernels() (kernels.h): the dense area's entries in core's
// device tables, one part per file (dense_register.h).
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/kernels.h"

namespace cohort::cuda {

void register_dense_kernels() {
  register_gemm_kernels();
  register_gelu_kernels();
  register_bf16_rows_kernels();
  register_conv2d_kernels();
  register_pool2d_kernels();
  register_layer_norm_kernels();
  register_cross_entropy_kernels();
  register_attention_kernels();
}

}  // namespace cohort::cuda
