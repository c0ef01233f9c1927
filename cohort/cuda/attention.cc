// CUDA kernels of the attention device ops (core/kernels/attention_device.h)
// over the launchers of attention_kernels.cu.
#include "cohort/base/error.h"
#include "cohort/core/kernels/attention_device.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

AttentionHeads heads(const kernels::DeviceHeadRows& h) {
  return {h.base.device_data(), h.heads, h.batch_stride, h.head_stride, h.row_stride};
}

AttentionDims dims(const kernels::AttentionShape& s, const char* op) {
  kernels::check_attention_shape(s, op);
  if (s.head_dim > kMaxAttentionHeadDim)
    throw NotSupported(fmt::format("{}: the CUDA kernel takes head_dim up to {}, got {}", op,
                                   kMaxAttentionHeadDim, s.head_dim));
  return {s.batch_heads, s.q_len, s.kv_len, s.head_dim, s.causal, static_cast<float>(s.scale)};
}

DType check_dtypes(std::initializer_list<const kernels::DeviceHeadRows*> ops, const Tensor& lse,
                   const char* op) {
  const DType t = (*ops.begin())->base.dtype();
  COHORT_CHECK(t == DType::kFloat32 || t == DType::kBFloat16,
               "{}: CUDA kernel takes float32 or bfloat16 operands, got {}", op, dtype_name(t));
  for (const kernels::DeviceHeadRows* h : ops)
    COHORT_CHECK(h->base.dtype() == t, "{}: operands of one dtype expected, got {} and {}", op,
                 dtype_name(t), dtype_name(h->base.dtype()));
  COHORT_CHECK(lse.dtype() == DType::kFloat32 && lse.is_contiguous(),
               "{}: lse must be a contiguous float32 tensor, got {}", op, dtype_name(lse.dtype()));
  return t;
}

void cuda_attention_forward(const kernels::AttentionShape& s, const kernels::DeviceHeadRows& q,
                            const kernels::DeviceHeadRows& k, const kernels::DeviceHeadRows& v,
                            const kernels::DeviceHeadRows& out, const Tensor& lse) {
  constexpr const char* op = "scaled_dot_product_attention";
  const AttentionDims d = dims(s, op);
  const DType t = check_dtypes({&q, &k, &v, &out}, lse, op);
  COHORT_CHECK(lse.numel() == s.batch_heads * s.q_len, "{}: lse must have {} elements, got {}", op,
               s.batch_heads * s.q_len, lse.numel());
  launch_attention_forward(t, d, heads(q), heads(k), heads(v), heads(out), lse.device_ptr<float>(),
                           current_cuda_stream(lse.device()));
}

void cuda_attention_backward(const kernels::AttentionShape& s, const kernels::DeviceHeadRows& q,
                             const kernels::DeviceHeadRows& k, const kernels::DeviceHeadRows& v,
                             const kernels::DeviceHeadRows& out, const Tensor& lse,
                             const kernels::DeviceHeadRows& dout, const kernels::DeviceHeadRows& dq,
                             const kernels::DeviceHeadRows& dk, const kernels::DeviceHeadRows& dv) {
  constexpr const char* op = "scaled_dot_product_attention_backward";
  const AttentionDims d = dims(s, op);
  const DType t = check_dtypes({&q, &k, &v, &out, &dout, &dq, &dk, &dv}, lse, op);
  COHORT_CHECK(lse.numel() == s.batch_heads * s.q_len, "{}: lse must have {} elements, got {}", op,
               s.batch_heads * s.q_len, lse.numel());
  Device dev = lse.device();
  Tensor delta = Tensor::empty({s.batch_heads * s.q_len}, DType::kFloat32, dev);
  launch_attention_backward(t, d, heads(q), heads(k), heads(v), heads(out), lse.device_ptr<float>(),
                            heads(dout), heads(dq), heads(dk), heads(dv), delta.device_ptr<float>(),
                            current_cuda_stream(dev));
}

}  // namespace

void register_attention_kernels() {
  kernels::attention_forward_device.set(DeviceType::kCUDA, &cuda_attention_forward);
  kernels::attention_backward_device.set(DeviceType::kCUDA, &cuda_attention_backward);
}

}  // namespace cohort::cuda
