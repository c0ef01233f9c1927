// Element-wise reduction kernels the algorithms apply to received data:
// dst[i] = op(dst[i], src[i]). Sum, product, min and max; avg reduces as sum
// and finish_avg divides once at the end. bfloat16/float16 go through float32
// and round to nearest even. The float loops are plain loops the compiler
// vectorizes (restrict pointers, no aliasing), compiled once per kernel path
// (AVX2 / AVX-512 copies chosen at run time, reduce_kernel_table.h).
//
// Thread safety: pure functions. The scalar conversions are exposed for tests
// and for the serial reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cohort/collectives/types.h"

namespace cohort::collectives {

// dst[0..count) = op(dst, src); dst and src must not overlap. kAvg acts as kSum.
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);
// data[i] /= divisor (integers: truncating), used once after a kAvg sum.
void finish_avg(void* data, size_t count, DataType dtype, int divisor);

float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t v);
uint16_t float_to_f16(float f);

}  // namespace cohort::collectives
