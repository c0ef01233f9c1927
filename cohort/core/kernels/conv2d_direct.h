// Internal to the *_isa.cc conv2d kernels: direct convolution on batch-16 buffers
// (see conv2d_layout.h). Every element is a vector over 16 samples, so the
// register tiles are (output channels x output columns) for the forward pass
// and (output channels x kernel columns) for the weight gradient, with no
// im2col copy and no horizontal reductions inside the loops.
// Thread safety: the functions write only the rows / partial sums they are
// given; callers split work between threads.
#pragma once

#include <cstdint>

#if !defined(COHORT_ISA_NS)
#error "conv2d_direct.h belongs to *_isa.cc kernel sources (see cohort/base/isa.h)"
#endif

namespace cohort::kernels::detail::COHORT_ISA_NS {

// One direct convolution over batch-16 buffers.
//   x  [groups][c][h][wp][16]: horizontal padding materialized (wp columns,
//      output column ow, tap kw reads column ow * sw + kw); vertical padding
//      `ph` is virtual (rows outside [0, h) are skipped).
//   w  packed [c][kh][kw][ocp], ocp = oc rounded up to the tile height, the
//      extra channels zero (see pack_weights).
//   y  [groups][oc][oh][ow][16].
struct DirectConv {
  int64_t c, h, wp, oc, ocp, kh, kw, sh, sw, ph, oh, ow;
  int tile_oc;  // output channels per register tile (ocp is a multiple)
};

// Picks the register tile for `oc` output channels.
int direct_tile_oc(int64_t oc);

// w [oc][c][kh][kw] -> packed [c][kh][kw][ocp]. With `flip_transpose`, w is
// read as the kernel of the transposed convolution (input/output channel
// roles swapped, taps rotated by 180 degrees), which turns a stride-1
// backward-input pass into a forward pass.
void pack_weights(const float* w, int64_t oc, int64_t c, int64_t kh, int64_t kw, int64_t ocp,
                  bool flip_transpose, float* packed);

// y rows [row0, row1) of one group (x, y point at the group): y = conv(x, w)
// (+ bias[oc] when bias is not null; then max(0, .) when relu).
void direct_forward_rows(const DirectConv& d, const float* x, const float* w, const float* bias,
                         bool relu, int64_t row0, int64_t row1, float* y);

// dw [oc][c][kh][kw] += sum over one group's pixels and lanes of dy (x) x,
// for input channels [c0, c1). x, dy point at the group.
void direct_backward_weight_channels(const DirectConv& d, const float* x, const float* dy,
                                     int64_t c0, int64_t c1, float* dw);

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
