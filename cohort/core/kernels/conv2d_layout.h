// Internal to the conv2d kernels: the "batch-16" layout and the transposes
// between it and NCHW.
//
// A batch-16 tensor stores 16 samples side by side in one AVX-512 vector:
//   [groups = ceil(N/16)][C][H][Wp][16], Wp = pad_left + W + pad_right,
// so every element of the plain algorithm becomes one vector over samples.
// Convolutions then vectorize without regard to image width, stride or
// padding, and weight gradients reduce across lanes only once per call.
// Lanes past the last sample and padding columns hold zeros.
// Thread safety: the functions only touch the rows they are given.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::kernels::detail {

constexpr int64_t kLanes = 16;

// One cache-line-aligned vector of 16 floats; std::vector<Vec16> gives
// aligned storage without manual allocation.
struct alignas(64) Vec16 {
  float v[kLanes];
};

// Grows `buf` to at least `vecs` vectors (never shrinks; contents are not
// preserved) and returns its data as floats.
float* ensure_vecs(std::vector<Vec16>& buf, int64_t vecs);

// Packs samples [16*g0, 16*g1) of src [N, C, H, W] (NCHW) into dst, laid out
// [g1-g0][C][H][pad_left + W + pad_right][16].
void pack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, int64_t pad_left,
                  int64_t pad_right, int64_t g0, int64_t g1, float* dst);

// Unpacks groups [g0, g1) of src [groups][C][H][W][16] into the matching
// samples of dst [N, C, H, W]; lanes past sample n-1 are dropped.
void unpack_batch16(const float* src, int64_t n, int64_t c, int64_t h, int64_t w, int64_t g0,
                    int64_t g1, float* dst);

}  // namespace cohort::kernels::detail
