// Public conv2d entry points: check the geometry, then run the batch-16
// direct kernels (conv2d_direct.h) when the batch fills the vector lanes well
// enough, else the general im2col + sgemm path (conv2d_im2col.h).
#include "cohort/core/kernels/conv2d.h"

#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/kernels/conv2d_direct.h"
#include "cohort/core/kernels/conv2d_im2col.h"
#include "cohort/core/kernels/conv2d_layout.h"

namespace cohort::kernels {
namespace {

using detail::DirectConv;
using detail::kLanes;
using detail::Vec16;

// Below this batch a batch-16 vector would be more than half padding.
constexpr int64_t kMinDirectBatch = 8;

// Per-thread scratch buffers, reused across calls so that steady-state
// training does not fault in fresh pages every step. A nested call on the same
// thread (possible when a waiting caller runs someone else's task) gets
// private buffers instead.
struct Scratch {
  std::vector<Vec16> buf[4];
  bool busy = false;
};

class ScratchLease {
 public:
  ScratchLease() {
    static thread_local Scratch tls;
    if (!tls.busy) {
      tls.busy = true;
      s_ = &tls;
    } else {
      own_ = std::make_unique<Scratch>();
      s_ = own_.get();
    }
  }
  ~ScratchLease() {
    if (!own_) s_->busy = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  float* get(int i, int64_t floats) {
    return detail::ensure_vecs(s_->buf[i], (floats + kLanes - 1) / kLanes);
  }

 private:
  Scratch* s_ = nullptr;
  std::unique_ptr<Scratch> own_;
};

int64_t groups_of(int64_t batch) { return (batch + kLanes - 1) / kLanes; }

void direct_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    bool relu, float* y) {
  const int tile = detail::direct_tile_oc(g.out_channels);
  DirectConv d{g.in_channels,
               g.in_h,
               g.in_w + 2 * g.pad_w,
               g.out_channels,
               (g.out_channels + tile - 1) / tile * tile,
               g.kernel_h,
               g.kernel_w,
               g.stride_h,
               g.stride_w,
               g.pad_h,
               g.out_h(),
               g.out_w(),
               tile};
  const int64_t groups = groups_of(g.batch);
  const int64_t xg = d.c * d.h * d.wp * kLanes, yg = d.oc * d.oh * d.ow * kLanes;
  ScratchLease scratch;
  float* wp = scratch.get(0, d.c * d.kh * d.kw * d.ocp);
  float* xb = scratch.get(1, groups * xg);
  float* yb = scratch.get(2, groups * yg);
  detail::pack_weights(w, g.out_channels, g.in_channels, g.kernel_h, g.kernel_w, d.ocp, false, wp);
  if (groups >= num_threads()) {
    // One group per task end to end: its buffers stay in that core's cache.
    parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t gi = g0; gi < g1; ++gi) {
        detail::pack_batch16(x, g.batch, g.in_channels, g.in_h, g.in_w, g.pad_w, g.pad_w, gi,
                             gi + 1, xb + gi * xg);
        detail::direct_forward_rows(d, xb + gi * xg, wp, bias, relu, 0, d.oh, yb + gi * yg);
        detail::unpack_batch16(yb + gi * yg, g.batch, d.oc, d.oh, d.ow, gi, gi + 1, y);
      }
    });
    return;
  }
  parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    detail::pack_batch16(x, g.batch, g.in_channels, g.in_h, g.in_w, g.pad_w, g.pad_w, g0, g1,
                         xb + g0 * xg);
  });
  parallel_for(0, groups * d.oh, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1;) {
      const int64_t gi = i / d.oh, r0 = i % d.oh, r1 = std::min(d.oh, r0 + (i1 - i));
      detail::direct_forward_rows(d, xb + gi * xg, wp, bias, relu, r0, r1, yb + gi * yg);
      i += r1 - r0;
    }
  });
  parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    detail::unpack_batch16(yb + g0 * yg, g.batch, d.oc, d.oh, d.ow, g0, g1, y);
  });
}

// Stride-1 backward-input is the forward convolution of dy, padded by
// kernel - 1 - pad, with the flipped and transposed kernel.
void direct_backward_input(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  const int tile = detail::direct_tile_oc(g.in_channels);
  const int64_t pw = g.kernel_w - 1 - g.pad_w;
  DirectConv d{g.out_channels,
               g.out_h(),
               g.out_w() + 2 * pw,
               g.in_channels,
               (g.in_channels + tile - 1) / tile * tile,
               g.kernel_h,
               g.kernel_w,
               1,
               1,
               g.kernel_h - 1 - g.pad_h,
               g.in_h,
               g.in_w,
               tile};
  const int64_t groups = groups_of(g.batch);
  const int64_t dyg = d.c * d.h * d.wp * kLanes, dxg = d.oc * d.oh * d.ow * kLanes;
  ScratchLease scratch;
  float* wp = scratch.get(0, d.c * d.kh * d.kw * d.ocp);
  float* dyb = scratch.get(1, groups * dyg);
  float* dxb = scratch.get(2, groups * dxg);
  detail::pack_weights(w, g.out_channels, g.in_channels, g.kernel_h, g.kernel_w, d.ocp, true, wp);
  const bool per_group = groups >= num_threads();
  auto pack = [&](int64_t g0, int64_t g1) {
    detail::pack_batch16(dy, g.batch, g.out_channels, d.h, g.out_w(), pw, pw, g0, g1,
                         dyb + g0 * dyg);
  };
  auto unpack = [&](int64_t g0, int64_t g1) {
    detail::unpack_batch16(dxb + g0 * dxg, g.batch, d.oc, d.oh, d.ow, g0, g1, dx);
  };
  if (per_group) {
    parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t gi = g0; gi < g1; ++gi) {
        pack(gi, gi + 1);
        detail::direct_forward_rows(d, dyb + gi * dyg, wp, nullptr, false, 0, d.oh, dxb + gi * dxg);
        unpack(gi, gi + 1);
      }
    });
    return;
  }
  parallel_for(0, groups, 1, pack);
  parallel_for(0, groups * d.oh, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1;) {
      const int64_t gi = i / d.oh, r0 = i % d.oh, r1 = std::min(d.oh, r0 + (i1 - i));
      detail::direct_forward_rows(d, dyb + gi * dyg, wp, nullptr, false, r0, r1, dxb + gi * dxg);
      i += r1 - r0;
    }
  });
  parallel_for(0, groups, 1, unpack);
}

void direct_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                            float* dbias) {
  DirectConv d{g.in_channels,
               g.in_h,
               g.in_w + 2 * g.pad_w,
               g.out_channels,
               g.out_channels,
               g.kernel_h,
               g.kernel_w,
               g.stride_h,
               g.stride_w,
               g.pad_h,
               g.out_h(),
               g.out_w(),
               1};
  const int64_t groups = groups_of(g.batch);
  const int64_t xg = d.c * d.h * d.wp * kLanes, dyg = d.oc * d.oh * d.ow * kLanes;
  const int64_t wsize = d.oc * d.c * d.kh * d.kw;
  const int64_t psize = wsize + d.oc;  // partial dw then partial dbias
  const bool per_group = groups >= num_threads();
  // Work items: (group, input channel). Each chunk of items sums into its own
  // partial, and the partials are added in chunk order: the result does not
  // depend on thread timing.
  const int64_t items = groups * d.c;
  const int64_t chunks = std::min<int64_t>(per_group ? groups : num_threads(), items);
  ScratchLease scratch;
  float* xb = scratch.get(0, groups * xg);
  float* dyb = scratch.get(1, groups * dyg);
  float* partial = scratch.get(2, chunks * psize);
  std::fill(partial, partial + chunks * psize, 0.0f);
  auto pack = [&](int64_t g0, int64_t g1) {
    detail::pack_batch16(x, g.batch, d.c, d.h, g.in_w, g.pad_w, g.pad_w, g0, g1, xb + g0 * xg);
    detail::pack_batch16(dy, g.batch, d.oc, d.oh, d.ow, 0, 0, g0, g1, dyb + g0 * dyg);
  };
  auto compute = [&](int64_t chunk) {
    const int64_t i0 = items * chunk / chunks, i1 = items * (chunk + 1) / chunks;
    float* p = partial + chunk * psize;
    for (int64_t i = i0; i < i1;) {
      const int64_t gi = i / d.c, c0 = i % d.c, c1 = std::min(d.c, c0 + (i1 - i));
      if (per_group) pack(gi, gi + 1);
      detail::direct_backward_weight_channels(d, xb + gi * xg, dyb + gi * dyg, c0, c1, p);
      if (c0 == 0 && dbias) {
        for (int64_t oc = 0; oc < d.oc; ++oc) {
          const float* row = dyb + gi * dyg + oc * d.oh * d.ow * kLanes;
          __m512 s = _mm512_setzero_ps();
          for (int64_t k = 0; k < d.oh * d.ow; ++k)
            s = _mm512_add_ps(s, _mm512_load_ps(row + k * kLanes));
          p[wsize + oc] += _mm512_reduce_add_ps(s);
        }
      }
      i += c1 - c0;
    }
  };
  if (!per_group) parallel_for(0, groups, 1, pack);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) compute(c);
  });
  std::copy(partial, partial + wsize, dw);
  if (dbias) std::copy(partial + wsize, partial + psize, dbias);
  for (int64_t c = 1; c < chunks; ++c) {
    const float* p = partial + c * psize;
    for (int64_t i = 0; i < wsize; ++i) dw[i] += p[i];
    if (dbias)
      for (int64_t oc = 0; oc < d.oc; ++oc) dbias[oc] += p[wsize + oc];
  }
}

}  // namespace

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    float* y) {
  check_conv2d_geometry(g, "conv2d_forward");
  if (g.batch >= kMinDirectBatch) return direct_forward(g, x, w, bias, false, y);
  detail::im2col_forward(g, x, w, bias, false, y);
}

void conv2d_forward_relu(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                         float* y) {
  check_conv2d_geometry(g, "conv2d_forward_relu");
  if (g.batch >= kMinDirectBatch) return direct_forward(g, x, w, bias, true, y);
  detail::im2col_forward(g, x, w, bias, true, y);
}

void conv2d_backward_input(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  check_conv2d_geometry(g, "conv2d_backward_input");
  if (g.batch >= kMinDirectBatch && g.stride_h == 1 && g.stride_w == 1 && g.pad_h < g.kernel_h &&
      g.pad_w < g.kernel_w)
    return direct_backward_input(g, dy, w, dx);
  detail::im2col_backward_input(g, dy, w, dx);
}

void conv2d_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                            float* dbias) {
  check_conv2d_geometry(g, "conv2d_backward_weight");
  if (g.batch >= kMinDirectBatch) return direct_backward_weight(g, x, dy, dw, dbias);
  detail::im2col_backward_weight(g, x, dy, dw, dbias);
}

}  // namespace cohort::kernels
