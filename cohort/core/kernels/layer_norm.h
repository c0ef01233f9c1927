// LayerNorm over the last dimension of contiguous float32 rows, with the
// residual add optionally fused in: the kernels behind native::layer_norm
// (float32), native::add_layer_norm and their backward.
//
// Shapes: x, delta, s, y, g, dx [rows, n] (row-major, contiguous); w, b, dw,
// db [n]; mean, rstd [rows] (float64, as native::LayerNormResult keeps them).
// Forward: s = x + delta (when delta is given; stored in s when s is given),
// y = (s - mean) rstd w + b with rstd = 1/sqrt(biased var + eps), each row in
// one read from memory (its later passes hit L1). Backward: from the saved
// mean and rstd and the normalised input (x, or s for the fused form):
// dx = rstd (g w - mean(g w) - xhat mean(g w xhat)), dw = sum over rows of
// g xhat, db = sum of g.
// The row loops are those of transformer_rows.h for the kernel path in use.
// Rows are split over the caller's thread budget; dw and db add per-thread
// float blocks into double (no float sum runs over more than 64 rows).
// Null pointers: delta, s, w, b (forward); w, dx, dw, db (backward) may be
// null (dw/db/dx: not computed). Thread safety: reentrant; outputs must not
// alias inputs. Failure: none (the callers check shapes).
#pragma once

#include <cstdint>

#include "cohort/core/dtype.h"

namespace cohort::kernels {

// y16, when not null, gets y rounded to bf16 in the same pass.
void layer_norm_rows(const float* x, const float* delta, float* s, const float* w, const float* b,
                     float* y, double* mean, double* rstd, int64_t rows, int64_t n, double eps,
                     BFloat16* y16 = nullptr);

void layer_norm_backward_rows(const float* g, const float* x, const float* w, const double* mean,
                              const double* rstd, float* dx, float* dw, float* db, int64_t rows,
                              int64_t n);

}  // namespace cohort::kernels
