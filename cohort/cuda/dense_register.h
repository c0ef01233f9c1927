// The parts of register_dense_kernels() (kernels.h), one per file of the
// dense area: each sets its ops' CUDA entries in core's device tables.
#pragma once

namespace cohort::cuda {

void register_gemm_kernels();           // gemm.cc: mm, matmul, linear (+ bf16)
void register_gelu_kernels();           // gelu.cc: gelu_tanh, linear_gelu (+ backward)
void register_bf16_rows_kernels();      // bf16_rows.cc: the bf16 linear layers' row passes
void register_conv2d_kernels();         // conv2d.cc: conv2d forward / backward (cuDNN)
void register_pool2d_kernels();         // pool2d.cc: max_pool2d forward / backward
void register_layer_norm_kernels();     // layer_norm.cc: layer_norm, add_layer_norm (+ backward)
void register_cross_entropy_kernels();  // cross_entropy.cc: cross_entropy (+ backward)
void register_attention_kernels();      // attention.cc: flash attention (+ backward)

}  // namespace cohort::cuda
