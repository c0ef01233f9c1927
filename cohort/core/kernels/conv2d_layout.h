// Internal to the *_isa.cc conv2d kernels: the "batch-16" layout and the
// transposes between it and NCHW (one copy per ISA, in the ISA's namespace).
//
// A batch-16 tensor stores 16 samples side by side (one AVX-512 register, two
// AVX2 registers):
//   [groups = ceil(N/16)][C][H][Wp][16], Wp = pad_left + W + pad_right,
// so every element of the plain algorithm becomes one vector over samples.
// Convolutions then vectorize without regard to image width, stride or
// padding, and weight gradients reduce across lanes only once per call.
// Lanes past the last sample and padding columns hold zeros.
// Thread safety: the functions only touch the rows they are given.
#pragma once

#include <cstdint>

#if !defined(COHORT_ISA_NS)
#error "conv2d_layout.h belongs to *_isa.cc kernel sources (see cohort/base/isa.h)"
#endif

namespace cohort::kernels::detail::COHORT_ISA_NS {

// Zero rows and columns added around each plane when packing.
struct Padding {
  int64_t top = 0, bottom = 0, left = 0, right = 0;
};

// Packs samples [16*g0, 16*g1) of src [N, C, H, W] (NCHW) into dst, laid out
// [g1-g0][C][top + H + bottom][left + W + right][16]. With a mask (same shape
// as src), elements whose mask is <= 0 pack as zero: the backward of a ReLU
// whose output the mask is, fused into the copy.
void pack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, Padding pad,
                  int64_t g0, int64_t g1, float* dst, const float* mask = nullptr);

// Unpacks groups [g0, g1) of src [groups][C][top + H + bottom][left + W +
// right][16] into the matching samples of dst [N, C, H, W], dropping the
// padding and the lanes past sample n-1.
void unpack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, Padding pad,
                    int64_t g0, int64_t g1, float* dst);

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
