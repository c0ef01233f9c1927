// linear_cross_entropy: cross_entropy(linear(x, w), target) (mean over the
// targets not ignored) without the [N, V] logits, for a language model's head
// where they are the largest activation (GPT-2 at B 4, T 1024: 824 MB, and as
// much again for their gradient). Rows go in chunks of `chunk_rows` (0: about
// 16M logits a chunk); for each, the logits are made, reduced to the loss and,
// when x or w requires grad, turned at once into that chunk's share of the
// gradients d x = dlogits w and d w += dlogits^T x (core/native/linalg.h's
// gemm accumulating in place), which the graph keeps instead of the logits:
// [N, C] + [V, C] floats. Backward only scales them by the incoming gradient.
// The work is that of the plain pair (the two gradient products move from
// backward to forward), so gradients are computed even if backward never runs.
// Shapes: x [N, C] float32, w [V, C] float32 (the head's weight, e.g. a tied
// embedding), target int64 [N] in [0, V) or ignore_index -> 0-d float32.
// Other dtypes or devices, and a bf16 precision policy in force, take the
// plain pair cross_entropy(linear(x, w), ...), whose numbers are the same up
// to float rounding. All targets ignored: NaN, as the plain mean.
// Failure: InvalidArgument naming the operand whose shape or dtype is wrong,
// or a target out of range (from the cross-entropy kernel).
// Thread safety: as any op.
#pragma once

#include <cstdint>

#include "cohort/core/tensor.h"

namespace cohort {

Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& target,
                            int64_t ignore_index = -100, int64_t chunk_rows = 0);

}  // namespace cohort
