// Public conv2d entry points: check the geometry, then pick a path:
//  - batch >= kMinBatch16: batch-16 layout (conv2d_batch16.h): Winograd
//    F(4x4, 5x5) for 5x5 stride-1 layers with enough channels
//    (conv2d_winograd.h), direct AVX-512 kernels otherwise (conv2d_direct.h);
//  - smaller batches and the rest: im2col + sgemm (conv2d_im2col.h).
#include "cohort/core/kernels/conv2d.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cohort/core/kernels/conv2d_batch16.h"
#include "cohort/core/kernels/conv2d_im2col.h"

namespace cohort::kernels {
namespace {

// The batch-16 kernels need AVX-512; without it every call takes im2col.
#if defined(__AVX512F__)
#define COHORT_CONV_BATCH16 1
using detail::kMinBatch16;
#else
#define COHORT_CONV_BATCH16 0
#endif

bool batch16(const Conv2dGeometry& g) {
#if COHORT_CONV_BATCH16
  return g.batch >= kMinBatch16;
#else
  return false;
#endif
}

bool batch16_input_grad(const Conv2dGeometry& g) {
  return batch16(g) && g.stride_h == 1 && g.stride_w == 1 && g.pad_h < g.kernel_h &&
         g.pad_w < g.kernel_w;
}

// dy_mask only on the batch-16 paths (conv2d_backward masks up front
// otherwise).
void backward_input(const Conv2dGeometry& g, const float* dy, const float* dy_mask, const float* w,
                    float* dx) {
#if COHORT_CONV_BATCH16
  if (batch16_input_grad(g))
    return detail::batch16_conv(g, dy, w, nullptr, false, true, dy_mask, dx);
#endif
  detail::im2col_backward_input(g, dy, w, dx);
}

void backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, const float* dy_mask,
                     float* dw, float* dbias) {
#if COHORT_CONV_BATCH16
  if (batch16(g)) return detail::batch16_backward_weight(g, x, dy, dy_mask, dw, dbias);
#endif
  detail::im2col_backward_weight(g, x, dy, dw, dbias);
}

}  // namespace

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    float* y) {
  check_conv2d_geometry(g, "conv2d_forward");
#if COHORT_CONV_BATCH16
  if (batch16(g)) return detail::batch16_conv(g, x, w, bias, false, false, nullptr, y);
#endif
  detail::im2col_forward(g, x, w, bias, false, y);
}

void conv2d_forward_relu(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                         float* y) {
  check_conv2d_geometry(g, "conv2d_forward_relu");
#if COHORT_CONV_BATCH16
  if (batch16(g)) return detail::batch16_conv(g, x, w, bias, true, false, nullptr, y);
#endif
  detail::im2col_forward(g, x, w, bias, true, y);
}

void conv2d_backward_input(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  check_conv2d_geometry(g, "conv2d_backward_input");
  backward_input(g, dy, nullptr, w, dx);
}

void conv2d_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                            float* dbias) {
  check_conv2d_geometry(g, "conv2d_backward_weight");
  backward_weight(g, x, dy, nullptr, dw, dbias);
}

void conv2d_backward(const Conv2dGeometry& g, const float* x, const float* w, const float* dy,
                     const float* y_relu, float* dx, float* dw, float* dbias) {
  check_conv2d_geometry(g, "conv2d_backward");
  if (y_relu && (!batch16(g) || (dx && !batch16_input_grad(g)))) {
    // The im2col path takes plain gradients: apply the ReLU mask first.
    std::vector<float> masked(g.batch * g.out_channels * g.out_h() * g.out_w());
    for (size_t i = 0; i < masked.size(); ++i) masked[i] = y_relu[i] <= 0.0f ? 0.0f : dy[i];
    return conv2d_backward(g, x, w, masked.data(), nullptr, dx, dw, dbias);
  }
#if COHORT_CONV_BATCH16
  if (dx && dw && batch16_input_grad(g) &&
      detail::batch16_backward_shared(g, x, w, dy, y_relu, dx, dw, dbias))
    return;
#endif
  if (dx) backward_input(g, dy, y_relu, w, dx);
  if (dw || dbias) {
    if (dw) return backward_weight(g, x, dy, y_relu, dw, dbias);
    // Bias only: the sum of the (masked) gradient per channel.
    const int64_t plane = g.out_h() * g.out_w();
    for (int64_t oc = 0; oc < g.out_channels; ++oc) {
      double s = 0;
      for (int64_t n = 0; n < g.batch; ++n) {
        const int64_t base = (n * g.out_channels + oc) * plane;
        for (int64_t i = 0; i < plane; ++i)
          if (!y_relu || !(y_relu[base + i] <= 0.0f)) s += dy[base + i];
      }
      dbias[oc] = static_cast<float>(s);
    }
  }
}

}  // namespace cohort::kernels
