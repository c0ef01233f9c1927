// Batch-16 drivers of the conv2d kernels (conv2d_batch16.h), one copy per
// ISA: pack NCHW buffers into the batch-16 layout, run the Winograd or direct
// kernels over groups of 16 samples on the caller's thread budget, unpack
// the results.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <functional>

#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/conv2d.h"
#include "cohort/core/kernels/conv2d_batch16.h"
#include "cohort/core/kernels/conv2d_scratch.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/conv2d_direct.h"
#include "cohort/core/kernels/conv2d_layout.h"
#include "cohort/core/kernels/conv2d_winograd.h"
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

int64_t groups_of(int64_t batch) { return (batch + kLanes - 1) / kLanes; }

}  // namespace

bool winograd_fits(const Conv2dGeometry& g, bool transposed) {
  if (g.kernel_h != 5 || g.kernel_w != 5 || g.stride_h != 1 || g.stride_w != 1) return false;
  return winograd_pays(g.in_channels, g.out_channels, g.out_h(), g.out_w(), transposed);
}

namespace {

// Runs fn(chunk, item0, item1) for `chunks` contiguous ranges of [0, items),
// one task per chunk (so chunk ids can index per-task scratch).
void for_chunks(int64_t items, int64_t chunks,
                const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(c, items * c / chunks, items * (c + 1) / chunks);
  });
}

// Whether each task should run whole groups end to end (their buffers stay
// in one core's cache and only one group's buffers per task are live), rather
// than splitting every group's rows between the threads: when the groups
// divide evenly, or are many enough that the imbalance is small.
bool whole_groups(int64_t groups, int64_t threads) {
  return groups % threads == 0 || groups >= 4 * threads;
}

// One batch-16 pass: pack each group's input, compute its output rows, unpack
// the result.
struct Batch16Pass {
  int64_t groups, rows;           // output rows (or tile rows) per group
  int64_t in_floats, out_floats;  // packed buffer sizes per group
  int64_t scratch_floats;         // per task, for compute
  // pack: groups [g0, g1) into dst; unpack: from src.
  std::function<void(int64_t g0, int64_t g1, float* dst)> pack;
  std::function<void(int64_t g0, int64_t g1, const float* src)> unpack;
  std::function<void(const float* in, float* out, int64_t r0, int64_t r1, float* scratch)> compute;
};

void run(const Batch16Pass& p, ScratchLease& lease) {
  const int64_t threads = std::max(1, num_threads());
  if (whole_groups(p.groups, threads)) {
    const int64_t chunks = std::min(threads, p.groups);
    const int64_t slot = p.in_floats + p.out_floats + p.scratch_floats;
    float* slots = lease.get(1, chunks * slot);
    for_chunks(p.groups, chunks, [&](int64_t chunk, int64_t g0, int64_t g1) {
      float* in = slots + chunk * slot;
      float* out = in + p.in_floats;
      float* scratch = out + p.out_floats;
      for (int64_t gi = g0; gi < g1; ++gi) {
        p.pack(gi, gi + 1, in);
        p.compute(in, out, 0, p.rows, scratch);
        p.unpack(gi, gi + 1, out);
      }
    });
    return;
  }
  // Fewer groups than about 4 per thread: all are packed first (bounded
  // memory), then their rows are split evenly.
  const int64_t chunks = std::min(threads, p.groups * p.rows);
  float* in = lease.get(1, p.groups * p.in_floats);
  float* out = lease.get(2, p.groups * p.out_floats);
  float* scratch = lease.get(3, chunks * p.scratch_floats);
  parallel_for(0, p.groups, 1,
               [&](int64_t g0, int64_t g1) { p.pack(g0, g1, in + g0 * p.in_floats); });
  for_chunks(p.groups * p.rows, chunks, [&](int64_t chunk, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1;) {
      const int64_t gi = i / p.rows, r0 = i % p.rows, r1 = std::min(p.rows, r0 + (i1 - i));
      p.compute(in + gi * p.in_floats, out + gi * p.out_floats, r0, r1,
                scratch + chunk * p.scratch_floats);
      i += r1 - r0;
    }
  });
  parallel_for(0, p.groups, 1,
               [&](int64_t g0, int64_t g1) { p.unpack(g0, g1, out + g0 * p.out_floats); });
}

}  // namespace

// With `transposed` (stride 1 only): Winograd's transposed pass, or directly
// dy padded by kernel - 1 - pad convolved with the flipped, transposed kernel.
void batch16_conv(const Conv2dGeometry& g, const float* in, const float* w, const float* bias,
                  bool relu, bool transposed, const float* in_mask, float* out) {
  // The pass as a forward convolution: in [n][c][h][wd] -> out [n][oc][oh][ow].
  const int64_t n = g.batch;
  const int64_t c = transposed ? g.out_channels : g.in_channels;
  const int64_t h = transposed ? g.out_h() : g.in_h, wd = transposed ? g.out_w() : g.in_w;
  const int64_t oc = transposed ? g.in_channels : g.out_channels;
  const int64_t oh = transposed ? g.in_h : g.out_h(), ow = transposed ? g.in_w : g.out_w();
  const int64_t ph = transposed ? g.kernel_h - 1 - g.pad_h : g.pad_h;
  const int64_t pw = transposed ? g.kernel_w - 1 - g.pad_w : g.pad_w;
  const int64_t groups = groups_of(n);
  ScratchLease lease;
  Batch16Pass p;
  p.groups = groups;
  Padding pad, out_pad;
  int64_t in_group, out_group = oc * oh * ow * kLanes;
  float* wp;
  if (transposed && winograd_fits(g, true)) {
    // d describes the forward convolution with the channel roles swapped:
    // dy's blocks in, dx's padded tiles out (overlapping, so one task per
    // group).
    const WinogradConv d = make_winograd(c, oc, h, wd);
    pad = {0, 4 * d.tiles_h - h, 0, 4 * d.tiles_w - wd};
    out_pad = {g.pad_h, d.hp - oh - g.pad_h, g.pad_w, d.wp - ow - g.pad_w};
    in_group = c * 16 * d.tiles_h * d.tiles_w * kLanes;
    out_group = oc * d.hp * d.wp * kLanes;
    wp = lease.get(0, 64 * c * d.ocp);
    winograd_weights(w, g.out_channels, g.in_channels, d.ocp, true, wp);
    p.rows = 1;
    const int64_t grad = winograd_grad_floats(d, c);
    p.scratch_floats = grad + winograd_backward_input_scratch_floats(d);
    p.compute = [=](const float* inb, float* outb, int64_t, int64_t, float* scratch) {
      winograd_grad_transform(d, c, inb, scratch);
      winograd_backward_input_group(d, scratch, wp, outb, scratch + grad);
    };
  } else if (!transposed && winograd_fits(g, false)) {
    const WinogradConv d = make_winograd(c, oc, oh, ow);
    pad = {ph, d.hp - h - ph, pw, d.wp - wd - pw};
    in_group = c * d.hp * d.wp * kLanes;
    wp = lease.get(0, 64 * c * d.ocp);
    winograd_weights(w, g.out_channels, g.in_channels, d.ocp, false, wp);
    p.rows = d.tiles_h;
    p.scratch_floats = winograd_scratch_floats(d);
    p.compute = [=](const float* inb, float* outb, int64_t r0, int64_t r1, float* scratch) {
      winograd_forward_rows(d, inb, wp, bias, relu, r0, r1, outb, scratch);
    };
  } else {
    const int tile = direct_tile_oc(oc);
    const DirectConv d{c,
                       h,
                       wd + 2 * pw,
                       oc,
                       (oc + tile - 1) / tile * tile,
                       g.kernel_h,
                       g.kernel_w,
                       transposed ? 1 : g.stride_h,
                       transposed ? 1 : g.stride_w,
                       ph,
                       oh,
                       ow,
                       tile};
    pad = {0, 0, pw, pw};
    in_group = c * h * d.wp * kLanes;
    wp = lease.get(0, c * d.kh * d.kw * d.ocp);
    pack_weights(w, g.out_channels, g.in_channels, g.kernel_h, g.kernel_w, d.ocp, transposed, wp);
    p.rows = oh;
    p.scratch_floats = 0;
    p.compute = [=](const float* inb, float* outb, int64_t r0, int64_t r1, float*) {
      direct_forward_rows(d, inb, wp, bias, relu, r0, r1, outb);
    };
  }
  p.in_floats = in_group;
  p.out_floats = out_group;
  p.pack = [&](int64_t g0, int64_t g1, float* dst) {
    pack_batch16(in, n, c, h, wd, pad, g0, g1, dst, in_mask);
  };
  p.unpack = [&](int64_t g0, int64_t g1, const float* src) {
    unpack_batch16(src, n, oc, oh, ow, out_pad, g0, g1, out);
  };
  run(p, lease);
}

namespace {

// Transformed position (1, 1) of A dY A^T is the plain sum of the 4x4 block
// (row 1 of A^T is all ones): the bias gradient reads 16x fewer vectors there.
constexpr int64_t kSumPos = 9;

// dbias [oc] += sum over one group's pixels and lanes of dy [oc][plane][16].
void add_bias_grad(const float* dy, int64_t oc_n, int64_t plane, float* dbias) {
  for (int64_t oc = 0; oc < oc_n; ++oc) {
    const float* row = dy + oc * plane * kLanes;
    VN s = vzero();
    for (int64_t k = 0; k < plane; ++k)
      for (int h = 0; h < kHalves; ++h) s = vadd(s, vload(row + k * kLanes + h * kN));
    dbias[oc] += vsum(s);
  }
}

// Winograd weight gradient; each chunk of whole groups sums into its own
// transformed-domain partial, added in chunk order at the end.
void winograd_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy,
                              const float* dy_mask, float* dw, float* dbias) {
  const WinogradConv d = make_winograd(g.in_channels, g.out_channels, g.out_h(), g.out_w());
  const int64_t groups = groups_of(g.batch);
  const int64_t th4 = 4 * d.tiles_h, tw4 = 4 * d.tiles_w;
  const Padding xpad{g.pad_h, d.hp - g.in_h - g.pad_h, g.pad_w, d.wp - g.in_w - g.pad_w};
  const Padding dypad{0, th4 - d.oh, 0, tw4 - d.ow};
  const int64_t xg = d.c * d.hp * d.wp * kLanes, dyg = d.oc * th4 * tw4 * kLanes;
  const int64_t what = winograd_what_floats(d);
  // Partial what, then partial dbias, rounded to whole vectors (alignment).
  const int64_t psize = (what + d.oc + kLanes - 1) / kLanes * kLanes;
  const int64_t grad = winograd_grad_floats(d, d.oc);
  const int64_t work = xg + dyg + grad + winograd_weight_scratch_floats(d);
  const int64_t chunks = std::min<int64_t>(std::max(1, num_threads()), groups);
  ScratchLease lease;
  float* partial = lease.get(0, chunks * psize);
  float* scratch = lease.get(1, chunks * work);
  std::fill(partial, partial + chunks * psize, 0.0f);
  for_chunks(groups, chunks, [&](int64_t chunk, int64_t g0, int64_t g1) {
    float* p = partial + chunk * psize;
    float* xb = scratch + chunk * work;
    float* dyb = xb + xg;
    float* dg = dyb + dyg;
    float* s = dg + grad;
    for (int64_t gi = g0; gi < g1; ++gi) {
      pack_batch16(x, g.batch, d.c, g.in_h, g.in_w, xpad, gi, gi + 1, xb);
      pack_batch16(dy, g.batch, d.oc, d.oh, d.ow, dypad, gi, gi + 1, dyb, dy_mask);
      winograd_grad_transform(d, d.oc, dyb, dg);
      winograd_weight_group(d, xb, dg, p, s);
      if (dbias) add_bias_grad(dg + kSumPos * (grad / 64), d.oc, d.tiles_h * d.tiles_w, p + what);
    }
  });
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t i = 0; i < psize; ++i) partial[i] += partial[c * psize + i];
  winograd_weight_finish(d, partial, dw);
  if (dbias) std::copy(partial + what, partial + what + d.oc, dbias);
}

}  // namespace

void batch16_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy,
                             const float* dy_mask, float* dw, float* dbias) {
  // Winograd's unit of work is a whole group.
  if (winograd_fits(g, false) && whole_groups(groups_of(g.batch), std::max(1, num_threads())))
    return winograd_backward_weight(g, x, dy, dy_mask, dw, dbias);
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
  const int64_t psize = wsize + d.oc;  // partial dw, then partial dbias
  const int64_t threads = std::max(1, num_threads());
  const Padding xpad{0, 0, g.pad_w, g.pad_w};
  // Each chunk of work sums into its own partial, and the partials are added
  // in chunk order, so the result does not depend on thread timing.
  ScratchLease lease;
  int64_t chunks;
  float* partial;
  if (whole_groups(groups, threads)) {
    chunks = std::min(threads, groups);
    const int64_t slot = xg + dyg;
    float* slots = lease.get(0, chunks * slot);
    partial = lease.get(2, chunks * psize);
    std::fill(partial, partial + chunks * psize, 0.0f);
    for_chunks(groups, chunks, [&](int64_t chunk, int64_t g0, int64_t g1) {
      float* xb = slots + chunk * slot;
      float* dyb = xb + xg;
      float* p = partial + chunk * psize;
      for (int64_t gi = g0; gi < g1; ++gi) {
        pack_batch16(x, g.batch, d.c, d.h, g.in_w, xpad, gi, gi + 1, xb);
        pack_batch16(dy, g.batch, d.oc, d.oh, d.ow, Padding{}, gi, gi + 1, dyb, dy_mask);
        direct_backward_weight_channels(d, xb, dyb, 0, d.c, p);
        if (dbias) add_bias_grad(dyb, d.oc, d.oh * d.ow, p + wsize);
      }
    });
  } else {
    // Few groups: pack them all, then split (group, input channel) items.
    const int64_t items = groups * d.c;
    chunks = std::min(threads, items);
    float* xb = lease.get(0, groups * xg);
    float* dyb = lease.get(1, groups * dyg);
    partial = lease.get(2, chunks * psize);
    std::fill(partial, partial + chunks * psize, 0.0f);
    parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
      pack_batch16(x, g.batch, d.c, d.h, g.in_w, xpad, g0, g1, xb + g0 * xg);
      pack_batch16(dy, g.batch, d.oc, d.oh, d.ow, Padding{}, g0, g1, dyb + g0 * dyg, dy_mask);
    });
    for_chunks(items, chunks, [&](int64_t chunk, int64_t i0, int64_t i1) {
      float* p = partial + chunk * psize;
      for (int64_t i = i0; i < i1;) {
        const int64_t gi = i / d.c, c0 = i % d.c, c1 = std::min(d.c, c0 + (i1 - i));
        direct_backward_weight_channels(d, xb + gi * xg, dyb + gi * dyg, c0, c1, p);
        if (c0 == 0 && dbias) add_bias_grad(dyb + gi * dyg, d.oc, d.oh * d.ow, p + wsize);
        i += c1 - c0;
      }
    });
  }
  std::copy(partial, partial + wsize, dw);
  if (dbias) std::copy(partial + wsize, partial + psize, dbias);
  for (int64_t c = 1; c < chunks; ++c) {
    const float* p = partial + c * psize;
    for (int64_t i = 0; i < wsize; ++i) dw[i] += p[i];
    if (dbias)
      for (int64_t oc = 0; oc < d.oc; ++oc) dbias[oc] += p[wsize + oc];
  }
}

bool batch16_backward_shared(const Conv2dGeometry& g, const float* x, const float* w,
                             const float* dy, const float* dy_mask, float* dx, float* dw,
                             float* dbias) {
  const int64_t groups = groups_of(g.batch);
  const int64_t threads = std::max(1, num_threads());
  if (!winograd_fits(g, false) || !winograd_fits(g, true) || !whole_groups(groups, threads))
    return false;
  const int64_t c = g.in_channels, oc = g.out_channels;
  const WinogradConv dwd = make_winograd(c, oc, g.out_h(), g.out_w());  // weight gradient
  const WinogradConv dxd = make_winograd(oc, c, g.out_h(), g.out_w());  // transposed pass
  const int64_t th4 = 4 * dwd.tiles_h, tw4 = 4 * dwd.tiles_w;
  // x and dx share the forward's padded tile coordinates (dwd.hp == dxd.hp).
  const Padding xpad{g.pad_h, dwd.hp - g.in_h - g.pad_h, g.pad_w, dwd.wp - g.in_w - g.pad_w};
  const Padding dypad{0, th4 - dwd.oh, 0, tw4 - dwd.ow};
  const int64_t xg = c * dwd.hp * dwd.wp * kLanes, dyg = oc * th4 * tw4 * kLanes;
  const int64_t what = winograd_what_floats(dwd);
  const int64_t psize = (what + oc + kLanes - 1) / kLanes * kLanes;
  const int64_t grad = winograd_grad_floats(dwd, oc);  // dy transformed once for both
  const int64_t kernel_scratch =
      std::max(winograd_weight_scratch_floats(dwd), winograd_backward_input_scratch_floats(dxd));
  const int64_t work = 2 * xg + dyg + grad + kernel_scratch;  // xb, dxb, dyb, dg, kernels
  ScratchLease lease;
  float* u = lease.get(0, 64 * oc * dxd.ocp);
  float* partial = lease.get(1, threads * psize);
  float* scratch = lease.get(2, threads * work);
  winograd_weights(w, oc, c, dxd.ocp, true, u);
  std::fill(partial, partial + threads * psize, 0.0f);
  for_chunks(groups, threads, [&](int64_t chunk, int64_t g0, int64_t g1) {
    float* p = partial + chunk * psize;
    float* xb = scratch + chunk * work;
    float* dxb = xb + xg;
    float* dyb = dxb + xg;
    float* dg = dyb + dyg;
    float* s = dg + grad;
    for (int64_t gi = g0; gi < g1; ++gi) {
      pack_batch16(dy, g.batch, oc, dwd.oh, dwd.ow, dypad, gi, gi + 1, dyb, dy_mask);
      pack_batch16(x, g.batch, c, g.in_h, g.in_w, xpad, gi, gi + 1, xb);
      winograd_grad_transform(dwd, oc, dyb, dg);
      winograd_weight_group(dwd, xb, dg, p, s);
      if (dbias) add_bias_grad(dg + kSumPos * (grad / 64), oc, dwd.tiles_h * dwd.tiles_w, p + what);
      winograd_backward_input_group(dxd, dg, u, dxb, s);
      unpack_batch16(dxb, g.batch, c, g.in_h, g.in_w, xpad, gi, gi + 1, dx);
    }
  });
  for (int64_t k = 1; k < threads; ++k)
    for (int64_t i = 0; i < psize; ++i) partial[i] += partial[k * psize + i];
  winograd_weight_finish(dwd, partial, dw);
  if (dbias) std::copy(partial + what, partial + what + oc, dbias);
  return true;
}

extern const Batch16Ops kBatch16Ops;
const Batch16Ops kBatch16Ops{&batch16_conv, &batch16_backward_weight, &batch16_backward_shared};

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
