// Plain-loop convolution: the oracle the fast kernels are tested against.
// Written for obviousness, not speed; accumulates in double so that the
// oracle itself is not the source of rounding differences.
#include "cohort/core/kernels/conv2d.h"

#include <vector>

#include "cohort/base/error.h"

namespace cohort::kernels {

void check_conv2d_geometry(const Conv2dGeometry& g, const char* op) {
  COHORT_CHECK(g.batch >= 1 && g.in_channels >= 1 && g.in_h >= 1 && g.in_w >= 1 &&
                   g.out_channels >= 1 && g.kernel_h >= 1 && g.kernel_w >= 1,
               "{}: sizes must be >= 1, got batch={} in_channels={} in={}x{} out_channels={} "
               "kernel={}x{}",
               op, g.batch, g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w);
  COHORT_CHECK(g.stride_h >= 1 && g.stride_w >= 1 && g.pad_h >= 0 && g.pad_w >= 0,
               "{}: stride must be >= 1 and padding >= 0, got stride={}x{} padding={}x{}", op,
               g.stride_h, g.stride_w, g.pad_h, g.pad_w);
  COHORT_CHECK(g.in_h + 2 * g.pad_h >= g.kernel_h && g.in_w + 2 * g.pad_w >= g.kernel_w,
               "{}: kernel {}x{} is larger than the padded input {}x{}", op, g.kernel_h, g.kernel_w,
               g.in_h + 2 * g.pad_h, g.in_w + 2 * g.pad_w);
}

int64_t conv2d_macs(const Conv2dGeometry& g) {
  return g.batch * g.out_channels * g.out_h() * g.out_w() * g.in_channels * g.kernel_h * g.kernel_w;
}

namespace {

// Calls f(n, oc, oh, ow, c, kh, kw, x_index) for every (output, tap) pair that
// reads a real (non-padding) input element.
template <class F>
void for_each_tap(const Conv2dGeometry& g, F&& f) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oc = 0; oc < g.out_channels; ++oc)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow)
          for (int64_t c = 0; c < g.in_channels; ++c)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t ih = oh * g.stride_h - g.pad_h + kh;
                const int64_t iw = ow * g.stride_w - g.pad_w + kw;
                if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
                f(n, oc, oh, ow, c, kh, kw, ((n * g.in_channels + c) * g.in_h + ih) * g.in_w + iw);
              }
}

}  // namespace

void conv2d_forward_reference(const Conv2dGeometry& g, const float* x, const float* w,
                              const float* bias, float* y) {
  check_conv2d_geometry(g, "conv2d_forward_reference");
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  std::vector<double> acc(g.batch * g.out_channels * oh_n * ow_n, 0.0);
  for_each_tap(g, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t c, int64_t kh,
                      int64_t kw, int64_t xi) {
    acc[((n * g.out_channels + oc) * oh_n + oh) * ow_n + ow] +=
        double(x[xi]) * w[((oc * g.in_channels + c) * g.kernel_h + kh) * g.kernel_w + kw];
  });
  for (int64_t i = 0; i < static_cast<int64_t>(acc.size()); ++i) {
    const int64_t oc = (i / (oh_n * ow_n)) % g.out_channels;
    y[i] = static_cast<float>(acc[i] + (bias ? bias[oc] : 0.0f));
  }
}

void conv2d_backward_input_reference(const Conv2dGeometry& g, const float* dy, const float* w,
                                     float* dx) {
  check_conv2d_geometry(g, "conv2d_backward_input_reference");
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  std::vector<double> acc(g.batch * g.in_channels * g.in_h * g.in_w, 0.0);
  for_each_tap(g, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t c, int64_t kh,
                      int64_t kw, int64_t xi) {
    acc[xi] += double(dy[((n * g.out_channels + oc) * oh_n + oh) * ow_n + ow]) *
               w[((oc * g.in_channels + c) * g.kernel_h + kh) * g.kernel_w + kw];
  });
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<float>(acc[i]);
}

void conv2d_backward_weight_reference(const Conv2dGeometry& g, const float* x, const float* dy,
                                      float* dw, float* dbias) {
  check_conv2d_geometry(g, "conv2d_backward_weight_reference");
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  std::vector<double> acc(g.out_channels * g.in_channels * g.kernel_h * g.kernel_w, 0.0);
  for_each_tap(g, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t c, int64_t kh,
                      int64_t kw, int64_t xi) {
    acc[((oc * g.in_channels + c) * g.kernel_h + kh) * g.kernel_w + kw] +=
        double(dy[((n * g.out_channels + oc) * oh_n + oh) * ow_n + ow]) * x[xi];
  });
  for (size_t i = 0; i < acc.size(); ++i) dw[i] = static_cast<float>(acc[i]);
  if (dbias) {
    for (int64_t oc = 0; oc < g.out_channels; ++oc) {
      double s = 0;
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t p = 0; p < oh_n * ow_n; ++p)
          s += dy[(n * g.out_channels + oc) * oh_n * ow_n + p];
      dbias[oc] = static_cast<float>(s);
    }
  }
}

}  // namespace cohort::kernels
