// Public conv2d entry points: check the geometry, then pick a path:
//  - batch >= kMinBatch16 on the avx2 / avx512 kernel paths: batch-16 layout
//    (conv2d_batch16.h): Winograd F(4x4, 5x5) for 5x5 stride-1 layers with
//    enough channels, direct kernels otherwise;
//  - smaller batches, the baseline path and the rest: im2col + sgemm
//    (conv2d_im2col.h).
#include "cohort/core/kernels/conv2d.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/isa.h"
#include "cohort/core/kernels/conv2d_batch16.h"
#include "cohort/core/kernels/conv2d_im2col.h"

namespace cohort::kernels {
namespace detail {
COHORT_ISA_DECLARE_TABLE(Batch16Ops, kBatch16Ops)

const Batch16Ops* batch16_ops() { return COHORT_ISA_TABLE(Batch16Ops, nullptr, kBatch16Ops); }

}  // namespace detail

namespace {

using detail::Batch16Ops;
using detail::kMinBatch16;

// The batch-16 kernels when they take this geometry, else null.
const Batch16Ops* batch16(const Conv2dGeometry& g) {
  return g.batch >= kMinBatch16 ? detail::batch16_ops() : nullptr;
}

const Batch16Ops* batch16_input_grad(const Conv2dGeometry& g) {
  const bool fits =
      g.stride_h == 1 && g.stride_w == 1 && g.pad_h < g.kernel_h && g.pad_w < g.kernel_w;
  return fits ? batch16(g) : nullptr;
}

// dy_mask only on the batch-16 paths (conv2d_backward masks up front
// otherwise).
void backward_input(const Conv2dGeometry& g, const float* dy, const float* dy_mask, const float* w,
                    float* dx) {
  if (const Batch16Ops* ops = batch16_input_grad(g))
    return ops->conv(g, dy, w, nullptr, false, true, dy_mask, dx);
  detail::im2col_backward_input(g, dy, w, dx);
}

void backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, const float* dy_mask,
                     float* dw, float* dbias) {
  if (const Batch16Ops* ops = batch16(g)) return ops->backward_weight(g, x, dy, dy_mask, dw, dbias);
  detail::im2col_backward_weight(g, x, dy, dw, dbias);
}

}  // namespace

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    float* y) {
  check_conv2d_geometry(g, "conv2d_forward");
  if (const Batch16Ops* ops = batch16(g)) return ops->conv(g, x, w, bias, false, false, nullptr, y);
  detail::im2col_forward(g, x, w, bias, false, y);
}

void conv2d_forward_relu(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                         float* y) {
  check_conv2d_geometry(g, "conv2d_forward_relu");
  if (const Batch16Ops* ops = batch16(g)) return ops->conv(g, x, w, bias, true, false, nullptr, y);
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
  if (const Batch16Ops* ops = batch16_input_grad(g))
    if (dx && dw && ops->backward_shared(g, x, w, dy, y_relu, dx, dw, dbias)) return;
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
