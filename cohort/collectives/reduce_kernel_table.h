// Internal to reduce_kernels.cc: the float reductions dst[i] = op(dst[i],
// src[i]) (sum / avg-as-sum, product, min, max) per element type, one copy
// per kernel path.
//
// reduce_kernel_table() gives the table of cohort::kernel_path()
// (cohort/base/cpu.h): on the baseline path the plain loops of
// reduce_kernels.cc (the tests' oracle), on avx2 / avx512 the same loops
// compiled for that ISA (reduce_kernels_isa.cc), with float16 converted by
// F16C. Results are the reference's bit for bit, except the payload of a NaN
// (F16C quiets a signalling NaN and keeps payload bits the scalar conversion
// drops; a NaN stays a NaN of the same sign). Integer types always use the
// baseline loops. Pure functions; thread safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cohort/collectives/types.h"

namespace cohort::collectives {

struct ReduceKernelTable {
  // dst and src: n elements, not overlapping.
  void (*f32)(float* dst, const float* src, size_t n, ReduceOp op);
  void (*f64)(double* dst, const double* src, size_t n, ReduceOp op);
  void (*bf16)(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op);
  void (*f16)(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op);
};

// The table of the kernel path in use.
const ReduceKernelTable& reduce_kernel_table();
// The baseline table (the reference loops).
const ReduceKernelTable& reduce_kernel_table_reference();

}  // namespace cohort::collectives
