// Direct convolution on batch-16 buffers (conv2d_direct.h), for every ISA:
// register tiles of output channels x columns (forward) or output channels x
// kernel columns (weight gradient), each element a vector over samples.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "cohort/base/isa.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/conv2d_direct.h"
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

// Accumulators per register tile: 24 of 32 zmm; 12 of 16 ymm.
constexpr int kMaxAcc = kRegs == 32 ? 24 : 12;
constexpr int kMaxTileOc = 6;  // output channels per weight-gradient tile
constexpr int kMaxTaps = 6;    // kernel columns per weight-gradient tile

// acc[r][v] = sum over (c, kh, kw) of w[c][kh][kw][oc0 + r] * x[c][ih][(ow0 + v) * sw + kw].
template <int R, int V>
void forward_tile(const DirectConv& d, const float* x, const float* w, const float* bias, bool relu,
                  int64_t oc0, int64_t oh, int64_t ow0, float* y) {
  const int64_t ih0 = oh * d.sh - d.ph;
  const int64_t kh_lo = std::max<int64_t>(0, -ih0), kh_hi = std::min<int64_t>(d.kh, d.h - ih0);
  const int64_t sw16 = d.sw * 16;
  const VN zero = vzero();
  for (int h = 0; h < kHalves; ++h) {
    VN acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = zero;
    for (int64_t c = 0; c < d.c; ++c) {
      for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
        const float* xr = x + ((c * d.h + ih0 + kh) * d.wp + ow0 * d.sw) * 16 + h * kN;
        const float* wr = w + (c * d.kh + kh) * d.kw * d.ocp + oc0;
        for (int64_t kw = 0; kw < d.kw; ++kw) {
          VN xv[V];
          for (int v = 0; v < V; ++v) xv[v] = vload(xr + v * sw16 + kw * 16);
          for (int r = 0; r < R; ++r) {
            const VN wv = vset1(wr[kw * d.ocp + r]);
            for (int v = 0; v < V; ++v) acc[r][v] = vfmadd(wv, xv[v], acc[r][v]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      if (oc0 + r >= d.oc) break;
      const VN b = bias ? vset1(bias[oc0 + r]) : zero;
      float* yr = y + (((oc0 + r) * d.oh + oh) * d.ow + ow0) * 16 + h * kN;
      for (int v = 0; v < V; ++v) {
        VN o = vadd(acc[r][v], b);
        if (relu) o = vmax(o, zero);
        vstore(yr + v * 16, o);
      }
    }
  }
}

// Columns per forward tile of R channels: the accumulators, V inputs and one
// broadcast weight must fit the registers.
constexpr int forward_tile_v(int r) {
  int v = kMaxAcc / r > 8 ? 8 : kMaxAcc / r;
  if (kRegs == 16 && v > (kRegs - 1) / (r + 1)) v = (kRegs - 1) / (r + 1);
  return v;
}

template <int R>
void forward_row(const DirectConv& d, const float* x, const float* w, const float* bias, bool relu,
                 int64_t oc0, int64_t oh, float* y) {
  constexpr int V = forward_tile_v(R);
  int64_t ow0 = 0;
  for (; ow0 + V <= d.ow; ow0 += V) forward_tile<R, V>(d, x, w, bias, relu, oc0, oh, ow0, y);
  // Remainder columns: one narrower tile.
  switch (d.ow - ow0) {
#define COHORT_TAIL(n)                                                             \
  case n:                                                                          \
    if constexpr (n < V) forward_tile<R, n>(d, x, w, bias, relu, oc0, oh, ow0, y); \
    break;
    COHORT_TAIL(1)
    COHORT_TAIL(2)
    COHORT_TAIL(3)
    COHORT_TAIL(4)
    COHORT_TAIL(5)
    COHORT_TAIL(6)
    COHORT_TAIL(7)
#undef COHORT_TAIL
    default:
      break;
  }
}

// acc[r][t] = sum over pixels and lanes of dy[oc0 + r][oh][ow] * x[c][ih][ow * sw + kw0 + t].
// On AVX2 both halves of each element add into one accumulator: the lanes
// are summed at the end anyway.
template <int R, int T>
void weight_tile(const DirectConv& d, const float* x, const float* dy, int64_t oc0, int64_t c,
                 int64_t kh, int64_t kw0, float* dw) {
  VN acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = vzero();
  const int64_t plane = d.oh * d.ow * 16;
  const int64_t sw16 = d.sw * 16;
  for (int64_t oh = 0; oh < d.oh; ++oh) {
    const int64_t ih = oh * d.sh - d.ph + kh;
    if (ih < 0 || ih >= d.h) continue;
    const float* xr = x + ((c * d.h + ih) * d.wp + kw0) * 16;
    const float* dr = dy + (oc0 * d.oh + oh) * d.ow * 16;
    for (int64_t ow = 0; ow < d.ow; ++ow) {
      for (int h = 0; h < kHalves; ++h) {
        VN xv[T];
        for (int t = 0; t < T; ++t) xv[t] = vload(xr + ow * sw16 + t * 16 + h * kN);
        for (int r = 0; r < R; ++r) {
          const VN dv = vload(dr + r * plane + ow * 16 + h * kN);
          for (int t = 0; t < T; ++t) acc[r][t] = vfmadd(dv, xv[t], acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (oc0 + r >= d.oc) break;
    float* out = dw + (((oc0 + r) * d.c + c) * d.kh + kh) * d.kw + kw0;
    for (int t = 0; t < T; ++t) out[t] += vsum(acc[r][t]);
  }
}

using WeightTileFn = void (*)(const DirectConv&, const float*, const float*, int64_t, int64_t,
                              int64_t, int64_t, float*);

template <int R, int... Ts>
constexpr std::array<WeightTileFn, sizeof...(Ts)> weight_row_table(
    std::integer_sequence<int, Ts...>) {
  return {&weight_tile<R, Ts + 1>...};
}

template <int... Rs>
constexpr std::array<std::array<WeightTileFn, kMaxTaps>, sizeof...(Rs)> weight_table(
    std::integer_sequence<int, Rs...>) {
  return {weight_row_table<Rs + 1>(std::make_integer_sequence<int, kMaxTaps>())...};
}

// kWeightTiles[R - 1][T - 1] = weight_tile<R, T>.
constexpr auto kWeightTiles = weight_table(std::make_integer_sequence<int, kMaxTileOc>());

}  // namespace

int direct_tile_oc(int64_t oc) {
  if (oc <= 3) return static_cast<int>(oc);
  // Fewest padded channels, then the taller tile.
  int best = 4;
  int64_t best_pad = (oc + 3) / 4 * 4;
  for (int r : {5, 6}) {
    const int64_t pad = (oc + r - 1) / r * r;
    if (pad <= best_pad) best = r, best_pad = pad;
  }
  return best;
}

void pack_weights(const float* w, int64_t oc, int64_t c, int64_t kh, int64_t kw, int64_t ocp,
                  bool flip_transpose, float* packed) {
  // Output index [ci][y][x][o]; in the flipped case ci is w's output channel
  // and o its input channel.
  const int64_t n_ci = flip_transpose ? oc : c, n_o = flip_transpose ? c : oc;
  for (int64_t ci = 0; ci < n_ci; ++ci)
    for (int64_t y = 0; y < kh; ++y)
      for (int64_t x = 0; x < kw; ++x) {
        float* out = packed + ((ci * kh + y) * kw + x) * ocp;
        for (int64_t o = 0; o < ocp; ++o) {
          if (o >= n_o) {
            out[o] = 0.0f;
          } else if (flip_transpose) {
            out[o] = w[((ci * c + o) * kh + (kh - 1 - y)) * kw + (kw - 1 - x)];
          } else {
            out[o] = w[((o * c + ci) * kh + y) * kw + x];
          }
        }
      }
}

void direct_forward_rows(const DirectConv& d, const float* x, const float* w, const float* bias,
                         bool relu, int64_t row0, int64_t row1, float* y) {
  for (int64_t oh = row0; oh < row1; ++oh)
    for (int64_t oc0 = 0; oc0 < d.ocp; oc0 += d.tile_oc) {
      switch (d.tile_oc) {
        case 1:
          forward_row<1>(d, x, w, bias, relu, oc0, oh, y);
          break;
        case 2:
          forward_row<2>(d, x, w, bias, relu, oc0, oh, y);
          break;
        case 3:
          forward_row<3>(d, x, w, bias, relu, oc0, oh, y);
          break;
        case 4:
          forward_row<4>(d, x, w, bias, relu, oc0, oh, y);
          break;
        case 5:
          forward_row<5>(d, x, w, bias, relu, oc0, oh, y);
          break;
        default:
          forward_row<6>(d, x, w, bias, relu, oc0, oh, y);
          break;
      }
    }
}

void direct_backward_weight_channels(const DirectConv& d, const float* x, const float* dy,
                                     int64_t c0, int64_t c1, float* dw) {
  // Tile: all kernel columns (up to kMaxTaps) x as many output channels as
  // fit in kMaxAcc accumulators; edge tiles shrink instead of padding, as dy
  // has exactly d.oc channels.
  const int64_t taps = std::min<int64_t>(d.kw, kMaxTaps);
  const int64_t tile_oc = std::clamp<int64_t>(kMaxAcc / taps, 1, kMaxTileOc);
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t kh = 0; kh < d.kh; ++kh)
      for (int64_t oc0 = 0; oc0 < d.oc; oc0 += tile_oc) {
        const int64_t r = std::min(tile_oc, d.oc - oc0);
        for (int64_t kw0 = 0; kw0 < d.kw; kw0 += taps) {
          const int64_t t = std::min(taps, d.kw - kw0);
          kWeightTiles[r - 1][t - 1](d, x, dy, oc0, c, kh, kw0, dw);
        }
      }
}

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
