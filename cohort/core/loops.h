// Strided n-d loops shared by the kernels. for_each_row walks a shape with K
// operands, each with its own strides (in elements; 0 for a broadcast dim),
// and calls row(offsets, n, inner_strides) once per innermost row, after
// merging dims that are laid out contiguously for every operand (so a fully
// contiguous case is one long row). Rows are split over cohort::parallel_for
// when the shape holds at least `grain` elements per chunk.
#pragma once

#include <array>
#include <cstdint>

#include "cohort/base/parallel.h"
#include "cohort/core/shape.h"

namespace cohort {

template <size_t K>
struct LoopShape {
  Shape sizes;                   // merged sizes, innermost last
  std::array<Shape, K> strides;  // per operand, same length as sizes
};

// Drops size-1 dims and merges adjacent dims that are contiguous for all operands.
template <size_t K>
LoopShape<K> coalesce(const Shape& sizes, const std::array<Shape, K>& strides) {
  LoopShape<K> out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!out.sizes.empty()) {
      bool merge = true;
      for (size_t k = 0; k < K; ++k) {
        if (out.strides[k].back() != strides[k][d] * sizes[d]) merge = false;
      }
      if (merge) {
        out.sizes.back() *= sizes[d];
        for (size_t k = 0; k < K; ++k) out.strides[k].back() = strides[k][d];
        continue;
      }
    }
    out.sizes.push_back(sizes[d]);
    for (size_t k = 0; k < K; ++k) out.strides[k].push_back(strides[k][d]);
  }
  if (out.sizes.empty()) {
    out.sizes.push_back(1);
    for (size_t k = 0; k < K; ++k) out.strides[k].push_back(0);
  }
  return out;
}

template <size_t K, typename Row>
void for_each_row(const Shape& sizes, const std::array<Shape, K>& strides, Row&& row,
                  int64_t grain = 32768) {
  if (shape_numel(sizes) == 0) return;
  LoopShape<K> ls = coalesce<K>(sizes, strides);
  const int64_t nd = static_cast<int64_t>(ls.sizes.size());
  const int64_t inner = ls.sizes.back();
  std::array<int64_t, K> inner_strides;
  for (size_t k = 0; k < K; ++k) inner_strides[k] = ls.strides[k].back();
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < nd; ++d) rows *= ls.sizes[d];
  auto run = [&](int64_t r0, int64_t r1) {
    // Multi-index of row r0 over dims [0, nd-1).
    Shape idx(nd > 1 ? nd - 1 : 0, 0);
    int64_t rem = r0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = rem % ls.sizes[d];
      rem /= ls.sizes[d];
    }
    std::array<int64_t, K> off{};
    for (size_t k = 0; k < K; ++k)
      for (int64_t d = 0; d + 1 < nd; ++d) off[k] += idx[d] * ls.strides[k][d];
    for (int64_t r = r0; r < r1; ++r) {
      row(off, inner, inner_strides);
      for (int64_t d = nd - 2; d >= 0; --d) {
        ++idx[d];
        for (size_t k = 0; k < K; ++k) off[k] += ls.strides[k][d];
        if (idx[d] < ls.sizes[d]) break;
        for (size_t k = 0; k < K; ++k) off[k] -= ls.strides[k][d] * ls.sizes[d];
        idx[d] = 0;
      }
    }
  };
  if (rows == 1) {
    // One long row: split it instead.
    if (inner >= 2 * grain && num_threads() > 1) {
      parallel_for(0, inner, grain, [&](int64_t b, int64_t e) {
        std::array<int64_t, K> off;
        for (size_t k = 0; k < K; ++k) off[k] = b * inner_strides[k];
        row(off, e - b, inner_strides);
      });
    } else {
      std::array<int64_t, K> off{};
      row(off, inner, inner_strides);
    }
    return;
  }
  int64_t row_grain = std::max<int64_t>(1, grain / std::max<int64_t>(inner, 1));
  parallel_for(0, rows, row_grain, run);
}

// Strides of `t_sizes/t_strides` broadcast to `out` (0 on broadcast dims).
inline Shape broadcast_strides(const Shape& t_sizes, const Shape& t_strides, const Shape& out) {
  Shape st(out.size(), 0);
  size_t off = out.size() - t_sizes.size();
  for (size_t i = 0; i < t_sizes.size(); ++i) st[off + i] = t_sizes[i] == 1 ? 0 : t_strides[i];
  return st;
}

}  // namespace cohort
