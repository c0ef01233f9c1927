// Winograd F(4x4, 5x5) forward and backward-input passes on batch-16
// buffers (conv2d_winograd.h), for every ISA.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "cohort/base/isa.h"

COHORT_ISA_BEGIN
#include "cohort/core/kernels/conv2d_winograd.h"
#include "cohort/core/kernels/conv2d_winograd_transforms.h"
#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS {
namespace {

using namespace winograd;  // NOLINT: the transforms are this file's vocabulary

constexpr int kMaxTileOc = 6;
constexpr int kMaxTileT = 6;

// For every position: acc[r][t] = sum over c of u[pos][c][oc0 + r] *
// v[pos][c][t]; m[pos][r][t] = acc. v rows (one per c, T vectors used) are
// v_row floats apart and positions v_pos apart; u holds c_n x ocp floats per
// position.
template <int R, int T>
void gemm_tile(int64_t c_n, const float* v, int64_t v_row, int64_t v_pos, const float* u,
               int64_t ocp, float* m) {
  const int64_t u_pos = c_n * ocp;
  for (int pos = 0; pos < kPos; ++pos, v += v_pos, u += u_pos, m += R * T * 16) {
    for (int h = 0; h < kHalves; ++h) {
      VN acc[R][T];
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = vzero();
      const float* vc = v + h * kN;
      const float* uc = u;
      for (int64_t c = 0; c < c_n; ++c, vc += v_row, uc += ocp) {
        VN vv[T];
        for (int t = 0; t < T; ++t) vv[t] = vload(vc + t * 16);
        for (int r = 0; r < R; ++r) {
          const VN uu = vset1(uc[r]);
          for (int t = 0; t < T; ++t) acc[r][t] = vfmadd(uu, vv[t], acc[r][t]);
        }
      }
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) vstore(m + (r * T + t) * 16 + h * kN, acc[r][t]);
    }
  }
}

using GemmFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*);

template <int R, int... Ts>
constexpr std::array<GemmFn, sizeof...(Ts)> gemm_row(std::integer_sequence<int, Ts...>) {
  return {&gemm_tile<R, Ts + 1>...};
}
template <int... Rs>
constexpr std::array<std::array<GemmFn, kMaxTileT>, sizeof...(Rs)> gemm_table(
    std::integer_sequence<int, Rs...>) {
  return {gemm_row<Rs + 1>(std::make_integer_sequence<int, kMaxTileT>())...};
}
// kGemm[R - 1][T - 1] = gemm_tile<R, T>.
constexpr auto kGemm = gemm_table(std::make_integer_sequence<int, kMaxTileOc>());

}  // namespace

WinogradConv make_winograd(int64_t c, int64_t oc, int64_t oh, int64_t ow) {
  WinogradConv d{};
  d.c = c;
  d.oc = oc;
  d.oh = oh;
  d.ow = ow;
  d.tiles_h = (oh + 3) / 4;
  d.tiles_w = (ow + 3) / 4;
  d.hp = 4 * d.tiles_h + 4;
  d.wp = 4 * d.tiles_w + 4;
  // Tiles per register block: a divisor of the row of tiles when one fits;
  // then output channels: as many as fit beside the tiles in the registers
  // (25 accumulators of 32 zmm; on AVX2 the accumulators, T inputs and one
  // broadcast in 16 ymm), preferring a divisor of oc.
  constexpr bool kWide = kRegs == 32;
  d.tile_t = kWide ? 4 : 3;
  for (int t : kWide ? std::array<int, 3>{5, 6, 4} : std::array<int, 3>{3, 2, 3})
    if (d.tiles_w % t == 0) {
      d.tile_t = t;
      break;
    }
  if (d.tiles_w < d.tile_t) d.tile_t = static_cast<int>(d.tiles_w);
  const int max_r = std::min(kMaxTileOc, kWide ? 25 / d.tile_t : (kRegs - 1 - d.tile_t) / d.tile_t);
  d.tile_oc = static_cast<int>(std::min<int64_t>(oc, max_r));
  for (int r = d.tile_oc; r >= std::max(1, max_r - 2); --r)
    if (oc % r == 0) {
      d.tile_oc = r;
      break;
    }
  d.ocp = (oc + d.tile_oc - 1) / d.tile_oc * d.tile_oc;
  return d;
}

bool winograd_pays(int64_t c, int64_t oc, int64_t oh, int64_t ow, bool transposed) {
  // Vector operations per 4x4 block of the forward output: direct 16 * 25 *
  // c * oc; Winograd 384 * c (input transform) + 64 * c * oc + 192 * oc
  // (output transform), or for the transposed pass 168 * oc (gradient
  // transform) + 64 * c * oc + 640 * c (inverse transform and overlap-add).
  // Partial blocks at the edges count whole.
  const double blocks = double((oh + 3) / 4) * ((ow + 3) / 4);
  const double direct = double(oh) * ow * 25.0 * c * oc;
  const double wino = transposed ? blocks * (168.0 * oc + 64.0 * c * oc + 640.0 * c)
                                 : blocks * (384.0 * c + 64.0 * c * oc + 192.0 * oc);
  return 1.5 * wino < direct;
}

void winograd_weights(const float* w, int64_t oc, int64_t c, int64_t ocp, bool transposed,
                      float* u) {
  // u[pos][k][o]: k is the channel summed over, o the one produced. Each k
  // is done for 16 o at a time, one vector per element of g and G g.
  const int64_t n_k = transposed ? oc : c, n_o = transposed ? c : oc;
  VN g[25], t[8][5];
  for (int64_t k = 0; k < n_k; ++k)
    for (int64_t o0 = 0; o0 < ocp; o0 += 16) {
      const int64_t n = std::min<int64_t>(16, ocp - o0);
      alignas(64) float lanes[25][16] = {};
      for (int64_t o = o0; o < std::min(o0 + 16, n_o); ++o) {
        const float* src = transposed ? w + (k * c + o) * 25 : w + (o * c + k) * 25;
        for (int e = 0; e < 25; ++e) lanes[e][o - o0] = src[e];
      }
      for (int h = 0; h < kHalves && h * kN < n; ++h) {
        for (int e = 0; e < 25; ++e) g[e] = vload(lanes[e] + h * kN);
        for (int i = 0; i < 8; ++i)
          for (int x = 0; x < 5; ++x) {
            VN s = vzero();
            for (int y = 0; y < 5; ++y)
              s = vfmadd(vset1(static_cast<float>(kG[i][y])), g[y * 5 + x], s);
            t[i][x] = s;
          }
        for (int i = 0; i < 8; ++i)
          for (int j = 0; j < 8; ++j) {
            VN s = vzero();
            for (int x = 0; x < 5; ++x) s = vfmadd(t[i][x], vset1(static_cast<float>(kG[j][x])), s);
            vstore_first(u + ((i * 8 + j) * n_k + k) * ocp + o0 + h * kN, n - h * kN, s);
          }
      }
    }
}

int64_t winograd_scratch_floats(const WinogradConv& d) {
  // v [64][c][tile_t][16], m [64][tile_oc][tile_t][16], then tmp.
  return (kPos * (d.c + d.tile_oc) * d.tile_t +
          std::max<int64_t>(64, input_row_tmp_vecs(d.tile_t))) *
         16;
}

void winograd_forward_rows(const WinogradConv& d, const float* x, const float* u, const float* bias,
                           bool relu, int64_t a0, int64_t a1, float* y, float* scratch) {
  const int64_t tt = d.tile_t;
  float* v = scratch;                           // [64][c][tt][16]
  float* m = v + kPos * d.c * tt * 16;          // [64][tile_oc][tt][16]
  float* tmp = m + kPos * d.tile_oc * tt * 16;  // [64][16]
  const int64_t pitch = d.wp * 16;
  const VN zero = vzero();
  for (int64_t a = a0; a < a1; ++a) {
    for (int64_t b0 = 0; b0 < d.tiles_w; b0 += tt) {
      const int64_t nt = std::min(tt, d.tiles_w - b0);
      for (int64_t c = 0; c < d.c; ++c)
        input_transform_row(x + (c * d.hp + 4 * a) * pitch + 4 * b0 * 16, pitch, nt,
                            v + c * tt * 16, d.c * tt * 16, tmp);
      for (int64_t oc0 = 0; oc0 < d.ocp; oc0 += d.tile_oc) {
        kGemm[d.tile_oc - 1][nt - 1](d.c, v, tt * 16, d.c * tt * 16, u + oc0, d.ocp, m);
        for (int64_t r = 0; r < d.tile_oc && oc0 + r < d.oc; ++r) {
          const VN bv = bias ? vset1(bias[oc0 + r]) : zero;
          for (int64_t t = 0; t < nt; ++t)
            for (int h = 0; h < kHalves; ++h) {
              // Y = A^T M A: columns into tmp [4][8], then the four rows.
              for (int j = 0; j < 8; ++j) {
                VN col[8], s[4];
                for (int i = 0; i < 8; ++i)
                  col[i] = vload(m + (((i * 8 + j) * d.tile_oc + r) * nt + t) * 16 + h * kN);
                at8(col, s);
                for (int i = 0; i < 4; ++i) vstore(tmp + (i * 8 + j) * 16 + h * kN, s[i]);
              }
              const int64_t oh = 4 * a, ow = 4 * (b0 + t);
              for (int i = 0; i < 4 && oh + i < d.oh; ++i) {
                VN row[8], out[4];
                for (int j = 0; j < 8; ++j) row[j] = vload(tmp + (i * 8 + j) * 16 + h * kN);
                at8(row, out);
                float* yr = y + (((oc0 + r) * d.oh + oh + i) * d.ow + ow) * 16 + h * kN;
                for (int j = 0; j < 4 && ow + j < d.ow; ++j) {
                  VN o = vadd(out[j], bv);
                  if (relu) o = vmax(o, zero);
                  vstore(yr + j * 16, o);
                }
              }
            }
        }
      }
    }
  }
}

int64_t winograd_backward_input_scratch_floats(const WinogradConv& d) {
  // m [64][tile_oc][tile_t][16], 64 vectors of tmp.
  return (kPos * d.tile_oc * d.tile_t + 64) * 16;
}

void winograd_backward_input_group(const WinogradConv& d, const float* dg, const float* u,
                                   float* dx, float* scratch) {
  const int64_t tt = d.tile_t, tiles = d.tiles_h * d.tiles_w;
  const int64_t dg_row = tiles * 16, dg_pos = (d.c + 3) / 4 * 4 * tiles * 16;
  float* m = scratch;                           // [64][tile_oc][tt][16]
  float* tmp = m + kPos * d.tile_oc * tt * 16;  // [64][16]
  const int64_t dx_pitch = d.wp * 16, dx_plane = d.hp * dx_pitch;
  for (int64_t a = 0; a < d.tiles_h; ++a) {
    // Tile row a adds into dx rows [4a, 4a + 8); rows [4a, 4a + 4) already
    // hold row a - 1's contributions, so only the lower half starts at zero.
    for (int64_t o = 0; o < d.oc; ++o)
      std::fill_n(dx + o * dx_plane + (a == 0 ? 0 : 4 * a + 4) * dx_pitch,
                  (a == 0 ? 8 : 4) * dx_pitch, 0.0f);
    for (int64_t b0 = 0; b0 < d.tiles_w; b0 += tt) {
      const int64_t nt = std::min(tt, d.tiles_w - b0);
      const float* v = dg + (a * d.tiles_w + b0) * 16;
      for (int64_t o0 = 0; o0 < d.ocp; o0 += d.tile_oc) {
        kGemm[d.tile_oc - 1][nt - 1](d.c, v, dg_row, dg_pos, u + o0, d.ocp, m);
        for (int64_t r = 0; r < d.tile_oc && o0 + r < d.oc; ++r)
          for (int64_t t = 0; t < nt; ++t)
            for (int h = 0; h < kHalves; ++h) {
              // dX tile += B M B^T: columns into tmp [8][8], then the rows.
              for (int j = 0; j < 8; ++j) {
                VN col[8], e[8];
                for (int i = 0; i < 8; ++i)
                  col[i] = vload(m + (((i * 8 + j) * d.tile_oc + r) * nt + t) * 16 + h * kN);
                b8(col, e);
                for (int i = 0; i < 8; ++i) vstore(tmp + (i * 8 + j) * 16 + h * kN, e[i]);
              }
              float* out = dx + (o0 + r) * dx_plane + (4 * a * d.wp + 4 * (b0 + t)) * 16 + h * kN;
              for (int i = 0; i < 8; ++i) {
                VN row[8], e[8];
                for (int j = 0; j < 8; ++j) row[j] = vload(tmp + (i * 8 + j) * 16 + h * kN);
                b8(row, e);
                float* orow = out + i * dx_pitch;
                for (int j = 0; j < 8; ++j) vstore(orow + j * 16, vadd(vload(orow + j * 16), e[j]));
              }
            }
      }
    }
  }
}

}  // namespace cohort::kernels::detail::COHORT_ISA_NS
COHORT_ISA_END
