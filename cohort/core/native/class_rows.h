// Internal to the classification losses (native/loss.cc's nll_loss,
// kernels/cross_entropy.cc): the scores as [N, C] rows and the targets as N
// int64 class indices, checked the same way for both. Not part of the public
// API. Failure: InvalidArgument naming `op`, the shapes and what is needed.
#pragma once

#include <cstdint>

#include "cohort/core/tensor.h"

namespace cohort::native {

struct ClassRows {
  Tensor scores;  // [N, C] contiguous
  Tensor target;  // [N] int64 contiguous
  int64_t n, c;
};

// scores [N, C] or [C] (`what` names them in messages: "logits", "input"),
// target [N] (or a scalar for [C]) of int64, int32 or uint8 class indices.
// Ranges are the caller's to check (ignore_index differs).
inline ClassRows class_rows(const Tensor& scores, const Tensor& target, const char* op,
                            const char* what) {
  COHORT_CHECK(scores.dim() == 1 || scores.dim() == 2,
               "{}: {} must be [N, C] or [C], got {} (the [N, C, d...] form is not supported: "
               "move C last and flatten to [N*d, C])",
               op, what, shape_str(scores.sizes()));
  Tensor s2 = scores.dim() == 1 ? scores.unsqueeze(0) : scores;
  Tensor t1 = target.dim() == 0 ? target.reshape({1}) : target;
  COHORT_CHECK(t1.dim() == 1 && t1.sizes()[0] == s2.sizes()[0],
               "{}: target {} does not match {} {} (need [N] with N = {})", op,
               shape_str(target.sizes()), what, shape_str(scores.sizes()), s2.sizes()[0]);
  COHORT_CHECK(
      t1.dtype() == DType::kInt64 || t1.dtype() == DType::kInt32 || t1.dtype() == DType::kUInt8,
      "{}: target must hold integer class indices, got {}", op, dtype_name(t1.dtype()));
  return {s2.contiguous(), t1.to(DType::kInt64).contiguous(), s2.sizes()[0], s2.sizes()[1]};
}

}  // namespace cohort::native
