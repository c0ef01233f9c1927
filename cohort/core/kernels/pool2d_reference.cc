// Plain-loop max pooling: the oracle for the fast kernels.
#include "cohort/core/kernels/pool2d.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cohort/base/error.h"

namespace cohort::kernels {

void check_pool2d_geometry(const Pool2dGeometry& g, const char* op) {
  COHORT_CHECK(g.batch >= 1 && g.channels >= 1 && g.in_h >= 1 && g.in_w >= 1 && g.kernel_h >= 1 &&
                   g.kernel_w >= 1,
               "{}: sizes must be >= 1, got batch={} channels={} in={}x{} kernel={}x{}", op,
               g.batch, g.channels, g.in_h, g.in_w, g.kernel_h, g.kernel_w);
  COHORT_CHECK(g.stride_h >= 1 && g.stride_w >= 1, "{}: stride must be >= 1, got {}x{}", op,
               g.stride_h, g.stride_w);
  COHORT_CHECK(
      g.pad_h >= 0 && g.pad_w >= 0 && 2 * g.pad_h <= g.kernel_h && 2 * g.pad_w <= g.kernel_w,
      "{}: padding must be in [0, kernel/2], got padding={}x{} kernel={}x{}", op, g.pad_h, g.pad_w,
      g.kernel_h, g.kernel_w);
  COHORT_CHECK(g.in_h + 2 * g.pad_h >= g.kernel_h && g.in_w + 2 * g.pad_w >= g.kernel_w,
               "{}: kernel {}x{} is larger than the padded input {}x{}", op, g.kernel_h, g.kernel_w,
               g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w);
  COHORT_CHECK(g.in_h * g.in_w <= std::numeric_limits<int32_t>::max(),
               "{}: input plane {}x{} too large for int32 argmax", op, g.in_h, g.in_w);
}

void max_pool2d_forward_reference(const Pool2dGeometry& g, const float* x, float* y,
                                  int32_t* argmax) {
  check_pool2d_geometry(g, "max_pool2d_forward_reference");
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t p = 0; p < g.batch * g.channels; ++p) {
    const float* xp = x + p * g.in_h * g.in_w;
    for (int64_t oh = 0; oh < oh_n; ++oh)
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        // PyTorch's rule: start at the first in-bounds element with -inf and
        // take any larger value or any NaN.
        const int64_t ih0 = std::max<int64_t>(oh * g.stride_h - g.pad_h, 0);
        const int64_t iw0 = std::max<int64_t>(ow * g.stride_w - g.pad_w, 0);
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_i = ih0 * g.in_w + iw0;
        for (int64_t kh = 0; kh < g.kernel_h; ++kh)
          for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
            const int64_t ih = oh * g.stride_h - g.pad_h + kh;
            const int64_t iw = ow * g.stride_w - g.pad_w + kw;
            if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
            const float v = xp[ih * g.in_w + iw];
            if (v > best || std::isnan(v)) {
              best = v;
              best_i = ih * g.in_w + iw;
            }
          }
        y[(p * oh_n + oh) * ow_n + ow] = best;
        argmax[(p * oh_n + oh) * ow_n + ow] = static_cast<int32_t>(best_i);
      }
  }
}

void max_pool2d_backward_reference(const Pool2dGeometry& g, const float* dy, const int32_t* argmax,
                                   float* dx) {
  check_pool2d_geometry(g, "max_pool2d_backward_reference");
  const int64_t plane_in = g.in_h * g.in_w, plane_out = g.out_h() * g.out_w();
  for (int64_t i = 0; i < g.batch * g.channels * plane_in; ++i) dx[i] = 0.0f;
  for (int64_t p = 0; p < g.batch * g.channels; ++p)
    for (int64_t o = 0; o < plane_out; ++o)
      dx[p * plane_in + argmax[p * plane_out + o]] += dy[p * plane_out + o];
}

}  // namespace cohort::kernels
