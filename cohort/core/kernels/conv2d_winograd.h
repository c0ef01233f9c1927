// Internal to the *_isa.cc conv2d kernels: Winograd F(4x4, 5x5) convolution on
// batch-16 buffers (see conv2d_layout.h), for 5x5 stride-1 layers.
//
// Each 4x4 block of outputs comes from an 8x8 input tile: V = B^T d B,
// M = sum over input channels of U (.) V with U = G g G^T precomputed per
// call, Y = A^T M A. That is 64 multiplies per channel pair and 4x4 block
// instead of 400 (6.25x fewer than direct convolution), plus the transforms,
// which cost about as much as the multiplies on Net's conv2. Rounding error
// grows (points 0, +-1, +-1/2, +-2, inf): on Net's conv2 with ReLU inputs
// and default-initialised weights, the largest error is about 4e-6 of the
// largest output (rms 2e-6 relative) in all three passes, against about 2e-7
// for a direct fp32 sum.
// Thread safety: the functions write only the output rows they are given and
// the caller's scratch.
#pragma once

#include <cstdint>

#if !defined(COHORT_ISA_NS)
#error "conv2d_winograd.h belongs to *_isa.cc kernel sources (see cohort/base/isa.h)"
#endif

namespace cohort::kernels::detail::COHORT_ISA_NS {

struct WinogradConv {
  int64_t c, oc, ocp;        // input / output channels; ocp = oc rounded up to tile_oc
  int64_t hp, wp;            // input rows / columns incl. zero padding: 4 * tiles + 4
  int64_t oh, ow;            // output rows / columns
  int64_t tiles_h, tiles_w;  // ceil(oh / 4), ceil(ow / 4)
  int tile_oc, tile_t;       // register tile: output channels x tiles
};

// Geometry for `c` -> `oc` channels and an oh x ow output. The input buffer
// must then have hp x wp rows/columns, zero outside the real image.
WinogradConv make_winograd(int64_t c, int64_t oc, int64_t oh, int64_t ow);

// w [oc][c][5][5] -> u [64][c][ocp] (u = G g G^T per channel pair, extra
// channels zero); with `transposed`, u [64][oc][ocp] with ocp >= c, for
// winograd_backward_input_group.
void winograd_weights(const float* w, int64_t oc, int64_t c, int64_t ocp, bool transposed,
                      float* u);

// Whether Winograd is expected to beat direct convolution for c -> oc
// channels and an oh x ow output (by the operation counts, with margin).
// `transposed` asks about the backward-input pass of that convolution.
bool winograd_pays(int64_t c, int64_t oc, int64_t oh, int64_t ow, bool transposed);

// Floats of scratch one winograd_forward_rows call needs.
int64_t winograd_scratch_floats(const WinogradConv& d);

// Output tile rows [a0, a1) of one group: x [c][hp][wp][16] -> y
// [oc][oh][ow][16] (+ bias, then ReLU when relu).
void winograd_forward_rows(const WinogradConv& d, const float* x, const float* u, const float* bias,
                           bool relu, int64_t a0, int64_t a1, float* y, float* scratch);

// The gradient transform shared by both backward passes: for every 4x4
// block of dy [c][4 * tiles_h][4 * tiles_w][16] (zero past the output),
// dg [64][round4(c)][tiles_h * tiles_w][16] = A dY A^T (channels past c
// zero). winograd_grad_floats gives dg's size.
int64_t winograd_grad_floats(const WinogradConv& d, int64_t c);
void winograd_grad_transform(const WinogradConv& d, int64_t c, const float* dy, float* dg);

// Backward input of one group, the transpose of the forward pass: for each
// 4x4 block of dy, dX tile (8x8) += B (sum over oc of U (.) A dY A^T) B^T,
// tiles overlapping by 4. Call with d = make_winograd(oc, c, oh, ow) of the
// forward convolution (channels swapped: d.c is dy's channels), dg from
// winograd_grad_transform(d, d.c, ...) and u from winograd_weights(...,
// transposed = true, ...). dx gets [d.oc][hp][wp][16] in the forward's
// padded input coordinates (crop the padding when unpacking).
int64_t winograd_backward_input_scratch_floats(const WinogradConv& d);
void winograd_backward_input_group(const WinogradConv& d, const float* dg, const float* u,
                                   float* dx, float* scratch);

// Weight gradient in the transformed domain (the transpose of the forward):
//   dw[oc][c] = G^T (sum over samples and 4x4 blocks of (A dY A^T) (.) V) G.
// x is packed as for the forward pass (make_winograd's hp x wp, zero outside
// the image); dg is winograd_grad_transform(d, d.oc, dy, ...).
// The running sum `what` has winograd_what_floats(d) floats laid out in
// blocks of 4 output x 4 input channels; zero it, accumulate groups into it,
// then winograd_weight_finish turns it into dw.
int64_t winograd_what_floats(const WinogradConv& d);
int64_t winograd_weight_scratch_floats(const WinogradConv& d);
void winograd_weight_group(const WinogradConv& d, const float* x, const float* dg, float* what,
                           float* scratch);
// dw [oc][c][5][5] = G^T what G (overwrites dw).
void winograd_weight_finish(const WinogradConv& d, const float* what, float* dw);

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
