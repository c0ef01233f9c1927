// Internal to the GEMM drivers (linalg.cc, linalg_bf16.cc): a 2-D operand as
// a row-major GEMM takes it (data, leading dimension, transposed flag), so
// the transposed views that backward passes hand in reach the GEMM without a
// copy. Not part of the public API.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cohort/core/tensor.h"

namespace cohort::native {

struct GemmOperand {
  Tensor keep;  // the tensor whose data the GEMM reads (t itself, or a contiguous copy)
  bool trans = false;
  int64_t ld = 0;
};

// t must be 2-D. Copies (contiguous) only when neither t nor its transpose is
// row-major with a leading dimension the GEMM accepts.
inline GemmOperand as_gemm_operand(const Tensor& t) {
  const int64_t r = t.sizes()[0], c = t.sizes()[1];
  const int64_t s0 = t.strides()[0], s1 = t.strides()[1];
  if ((s1 == 1 || c == 1) && (s0 >= std::max<int64_t>(c, 1) || r == 1))
    return {t, false, std::max<int64_t>(r == 1 ? c : s0, 1)};
  if ((s0 == 1 || r == 1) && (s1 >= std::max<int64_t>(r, 1) || c == 1))
    return {t, true, std::max<int64_t>(c == 1 ? r : s1, 1)};
  return {t.contiguous(), false, std::max<int64_t>(c, 1)};
}

}  // namespace cohort::native
