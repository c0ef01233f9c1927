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

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <memory>
#include <vector>

namespace cohort::kernels::detail {

constexpr int64_t kLanes = 16;

// One cache-line-aligned vector of 16 floats; std::vector<Vec16> gives
// aligned storage without manual allocation.
struct alignas(64) Vec16 {
  float v[kLanes];
};

#if defined(__AVX512F__)
// Sum of the 16 lanes (GCC 12's _mm512_reduce_add_ps trips
// -Wmaybe-uninitialized).
inline float sum_lanes(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));
  return _mm512_cvtss_f32(v);
}
#endif

// Grows `buf` to at least `vecs` vectors (never shrinks; contents are not
// preserved) and returns its data as floats.
float* ensure_vecs(std::vector<Vec16>& buf, int64_t vecs);

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

// Scratch buffers for one kernel call, leased from a process-wide pool and
// returned when the lease ends, so that steady-state training reuses warm
// memory instead of faulting in fresh pages every step, whichever threads the
// calls come from. Concurrent (or nested) leases get different buffers; the
// pool grows to the largest number of leases ever held at once.
class ScratchLease {
 public:
  static constexpr int kBuffers = 4;
  ScratchLease();
  ~ScratchLease();
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  // Buffer i (< kBuffers), grown to at least `floats`, 64-byte aligned.
  float* get(int i, int64_t floats);

  struct Buffers {
    std::vector<Vec16> buf[kBuffers];
  };

 private:
  std::unique_ptr<Buffers> s_;
};

}  // namespace cohort::kernels::detail
