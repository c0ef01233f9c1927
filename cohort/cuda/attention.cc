// CUDA kernels of the attention device ops (core/kernels/attention_device.h):
// cuDNN's fused flash attention where it takes the shape (cudnn_attention.h;
// compiled, not run on a GPU), else the launchers of attention_kernels.cu.
// Both paths write and read the same lse (each row's natural log-sum-exp of
// the scaled scores), so either backward follows either forward.
#include "cohort/base/error.h"
#include "cohort/core/kernels/attention_device.h"
#include "cohort/cuda/cudnn_attention.h"
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
  return {s.batch_heads, s.q_len, s.kv_len, s.head_dim, s.causal, static_cast<float>(s.scale)};
}

// What cuDNN did not take goes to cohort's kernel, which has these limits.
void check_own_kernel(const AttentionDims& d, DType t, const char* op) {
  if (d.head_dim > kMaxAttentionHeadDim)
    throw NotSupported(fmt::format("{}: the CUDA kernel takes head_dim up to {}, got {}", op,
                                   kMaxAttentionHeadDim, d.head_dim));
  if (t == DType::kFloat16)
    throw NotSupported(fmt::format(
        "{}: float16 runs only where cuDNN's fused attention takes the shape (causal, q_len == "
        "kv_len, head_dim a multiple of 8, sm_80+); use bfloat16 or float32",
        op));
}

DType check_dtypes(std::initializer_list<const kernels::DeviceHeadRows*> ops, const Tensor& lse,
                   const char* op) {
  const DType t = (*ops.begin())->base.dtype();
  COHORT_CHECK(t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16,
               "{}: CUDA kernel takes float32, bfloat16 or float16 operands, got {}", op,
               dtype_name(t));
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
  SdpaRequest r{t, false, d, {heads(q), heads(k), heads(v), heads(out)}};
  if (cudnn_sdpa_forward(lse.device(), r, lse.device_ptr<float>())) return;
  check_own_kernel(d, t, op);
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
  SdpaRequest r{
      t,
      true,
      d,
      {heads(q), heads(k), heads(v), heads(out), heads(dout), heads(dq), heads(dk), heads(dv)}};
  if (cudnn_sdpa_backward(dev, r, lse.device_ptr<float>())) return;
  check_own_kernel(d, t, op);
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
