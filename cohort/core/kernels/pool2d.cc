// Fast max pooling: planes split over the caller's thread budget, with
// vectorized planes for the usual 2x2 / stride 2 window (pool2d_isa.cc) on
// the avx2 and avx512 kernel paths.
#include "cohort/core/kernels/pool2d.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cohort/base/cpu.h"
#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/pool2d_fast.h"

namespace cohort::kernels {
namespace detail {
COHORT_ISA_DECLARE_TABLE(Pool2dFastOps, kPool2dFastOps)

const Pool2dFastOps* pool2d_fast_ops() {
  return COHORT_ISA_TABLE(Pool2dFastOps, nullptr, kPool2dFastOps);
}

}  // namespace detail

namespace {

void pool_plane(const Pool2dGeometry& g, const float* xp, float* yp, int32_t* ap) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t oh = 0; oh < oh_n; ++oh) {
    const int64_t h_lo = oh * g.stride_h - g.pad_h;
    const int64_t ih0 = std::max<int64_t>(h_lo, 0);
    const int64_t ih1 = std::min<int64_t>(h_lo + g.kernel_h, g.in_h);
    for (int64_t ow = 0; ow < ow_n; ++ow) {
      const int64_t w_lo = ow * g.stride_w - g.pad_w;
      const int64_t iw0 = std::max<int64_t>(w_lo, 0);
      const int64_t iw1 = std::min<int64_t>(w_lo + g.kernel_w, g.in_w);
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_i = ih0 * g.in_w + iw0;
      for (int64_t ih = ih0; ih < ih1; ++ih) {
        const float* row = xp + ih * g.in_w;
        for (int64_t iw = iw0; iw < iw1; ++iw) {
          const float v = row[iw];
          if (v > best || std::isnan(v)) {
            best = v;
            best_i = ih * g.in_w + iw;
          }
        }
      }
      yp[oh * ow_n + ow] = best;
      ap[oh * ow_n + ow] = static_cast<int32_t>(best_i);
    }
  }
}

}  // namespace

void max_pool2d_forward(const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax) {
  check_pool2d_geometry(g, "max_pool2d_forward");
  const int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
  const int64_t planes = g.batch * g.channels;
  const bool is_2x2 = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 &&
                      g.pad_h == 0 && g.pad_w == 0;
  const detail::Pool2dFastOps* fast = is_2x2 ? detail::pool2d_fast_ops() : nullptr;
  parallel_for(0, planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane_in, 1)),
               [&](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p) {
                   if (fast) {
                     fast->forward_2x2(g, x + p * plane_in, y + p * plane_out,
                                       argmax + p * plane_out);
                     continue;
                   }
                   pool_plane(g, x + p * plane_in, y + p * plane_out, argmax + p * plane_out);
                 }
               });
}

void max_pool2d_backward(const Pool2dGeometry& g, const float* dy, const int32_t* argmax,
                         float* dx) {
  check_pool2d_geometry(g, "max_pool2d_backward");
  const int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
  const int64_t planes = g.batch * g.channels;
  const bool is_2x2 = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 &&
                      g.pad_h == 0 && g.pad_w == 0;
  const detail::Pool2dFastOps* fast = is_2x2 ? detail::pool2d_fast_ops() : nullptr;
  parallel_for(0, planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane_in, 1)),
               [&](int64_t p0, int64_t p1) {
                 if (fast) {
                   for (int64_t p = p0; p < p1; ++p)
                     fast->backward_2x2(g, dy + p * plane_out, argmax + p * plane_out,
                                        dx + p * plane_in);
                   return;
                 }
                 std::memset(dx + p0 * plane_in, 0, sizeof(float) * (p1 - p0) * plane_in);
                 for (int64_t p = p0; p < p1; ++p) {
                   float* dxp = dx + p * plane_in;
                   const float* dyp = dy + p * plane_out;
                   const int32_t* ap = argmax + p * plane_out;
                   for (int64_t o = 0; o < plane_out; ++o) dxp[ap[o]] += dyp[o];
                 }
               });
}

}  // namespace cohort::kernels
