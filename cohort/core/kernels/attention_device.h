// Tensor-level device kernels (device_dispatch.h) of scaled dot-product
// attention, for the autograd ops (autograd/ops_attention.cc), which call the
// raw-pointer CPU kernels of attention.h directly and these when their
// tensors are on a device. Same semantics as attention.h: the forward keeps
// the output and each row's log-sum-exp, the backward recomputes the
// probabilities from them (O(T) memory, no T x T matrix).
// Operands are given as DeviceHeadRows: a tensor whose first element is
// element (0, 0, 0) of the [batch_heads, rows, head_dim] operand, and the
// strides of attention.h's HeadRows, so that the heads of GPT's packed
// [B, T, 3C] projection are read (and its gradient written) in place.
// dtypes: every operand float32, or every one bfloat16; lse float32
// [batch_heads * q_len]. Filled by the CUDA layer.
// Thread safety: as the kernels they name. Failure: a device without a
// kernel throws NotSupported naming the op (DeviceOp).
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/kernels/attention.h"
#include "cohort/core/tensor.h"

namespace cohort::kernels {

struct DeviceHeadRows {
  Tensor base;  // its storage and offset hold the operand; its dtype is the operand's
  int64_t heads = 1, batch_stride = 0, head_stride = 0, row_stride = 0;
};

// out and lse are written.
extern DeviceOp<void(const AttentionShape& s, const DeviceHeadRows& q, const DeviceHeadRows& k,
                     const DeviceHeadRows& v, const DeviceHeadRows& out, const Tensor& lse)>
    attention_forward_device;
// dq, dk, dv are overwritten.
extern DeviceOp<void(const AttentionShape& s, const DeviceHeadRows& q, const DeviceHeadRows& k,
                     const DeviceHeadRows& v, const DeviceHeadRows& out, const Tensor& lse,
                     const DeviceHeadRows& dout, const DeviceHeadRows& dq, const DeviceHeadRows& dk,
                     const DeviceHeadRows& dv)>
    attention_backward_device;

}  // namespace cohort::kernels
