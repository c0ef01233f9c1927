#include "cohort/core/kernels/layer_norm.h"

#include <algorithm>
#include <cstring>

#include "cohort/core/kernels/transformer_rows.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::kernels {

using detail::ColumnSums;
using detail::transformer_rows;

namespace {

// At least this many elements per thread's part.
int64_t min_rows(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

}  // namespace

void layer_norm_rows(const float* x, const float* delta, float* s, const float* w, const float* b,
                     float* y, double* mean, double* rstd, int64_t rows, int64_t n, double eps,
                     BFloat16* y16) {
  const auto& k = transformer_rows();
  detail::for_row_parts(
      rows, detail::row_parts(rows, min_rows(n)), [&](int64_t, int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          k.layer_norm(x + r * n, delta ? delta + r * n : nullptr, s ? s + r * n : nullptr, w, b,
                       y + r * n, n, eps, mean + r, rstd + r);
          if (y16) native::to_bf16(y + r * n, y16 + r * n, n);
        }
      });
}

void layer_norm_backward_rows(const float* g, const float* x, const float* w, const double* mean,
                              const double* rstd, float* dx, float* dw, float* db, int64_t rows,
                              int64_t n) {
  const auto& k = transformer_rows();
  const int64_t parts = detail::row_parts(rows, min_rows(n));
  const bool sums = dw || db;
  ColumnSums sw(dw ? parts : 0, n), sb(db ? parts : 0, n);
  detail::for_row_parts(rows, parts, [&](int64_t part, int64_t r0, int64_t r1) {
    for (int64_t b0 = r0; b0 < r1; b0 += ColumnSums::kFlushRows) {
      const int64_t b1 = std::min(b0 + ColumnSums::kFlushRows, r1);
      float* pw = dw ? sw.block(part) : nullptr;
      float* pb = db ? sb.block(part) : nullptr;
      for (int64_t r = b0; r < b1; ++r)
        k.layer_norm_backward(g + r * n, x + r * n, w, mean[r], rstd[r], dx ? dx + r * n : nullptr,
                              pw, pb, n);
      if (dw) sw.flush(part);
      if (db) sb.flush(part);
    }
  });
  if (!sums) return;
  if (dw) {
    Tensor t = sw.result({n});
    std::memcpy(dw, t.data_ptr<float>(), n * sizeof(float));
  }
  if (db) {
    Tensor t = sb.result({n});
    std::memcpy(db, t.data_ptr<float>(), n * sizeof(float));
  }
}

}  // namespace cohort::kernels
