// Internal to the Winograd conv2d kernels (*_isa.cc): the F(4, 5) transform
// matrices and the vectorized transforms shared by the forward and
// weight-gradient passes. Each element of a batch-16 buffer is 16 samples:
// one VN on AVX-512, two on AVX2 (the transforms then run once per half).
#pragma once

#include <cstdint>

#include "cohort/core/kernels/simd.h"

namespace cohort::kernels::detail::COHORT_ISA_NS::winograd {

constexpr int kPos = 64;  // 8x8 transformed positions

// The F(4, 5) matrices for points 0, 1, -1, 1/2, -1/2, 2, -2, inf (B^T rows
// scaled to integers, the scale moved into G):
//   B^T = [4  0 -21   0  21   0 -4 0;   0 -4 -4  17  17 -4 -4 0;
//          0  4  -4 -17  17   4 -4 0;   0  4  8  -5 -10  1  2 0;
//          0 -4   8   5 -10  -1  2 0;   0  2  1 -10  -5  8  4 0;
//          0 -2   1  10  -5  -8  4 0;   0 -4  0  21   0 -21 0 4]
//   A^T = [1 1  1   1    1   1  1 0;    0 1 -1 1/2 -1/2  2 -2 0;
//          0 1  1 1/4  1/4   4  4 0;    0 1 -1 1/8 -1/8  8 -8 1]
constexpr double kG[8][5] = {{1.0 / 4, 0, 0, 0, 0},
                             {1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18},
                             {1.0 / 18, -1.0 / 18, 1.0 / 18, -1.0 / 18, 1.0 / 18},
                             {16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45, 1.0 / 45},
                             {16.0 / 45, -8.0 / 45, 4.0 / 45, -2.0 / 45, 1.0 / 45},
                             {1.0 / 360, 2.0 / 360, 4.0 / 360, 8.0 / 360, 16.0 / 360},
                             {1.0 / 360, -2.0 / 360, 4.0 / 360, -8.0 / 360, 16.0 / 360},
                             {0, 0, 0, 0, 1.0 / 4}};

// t = B^T d for one column of 8 vectors. Rows for +p and -p share their even
// and odd parts: t(+p) = e + o, t(-p) = e - o.
inline void bt8(const VN d[8], VN t[8]) {
  const VN c2 = vset1(2.0f), c4 = vset1(4.0f), c5 = vset1(5.0f);
  const VN c17 = vset1(17.0f), c21 = vset1(21.0f);
  t[0] = vfmadd(c4, vsub(d[0], d[6]), vmul(c21, vsub(d[4], d[2])));
  t[7] = vfmadd(c4, vsub(d[7], d[1]), vmul(c21, vsub(d[3], d[5])));
  // rows 1, 2: e = 17 d4 - 4 (d2 + d6), o = 17 d3 - 4 (d1 + d5)
  const VN e1 = vfnmadd(c4, vadd(d[2], d[6]), vmul(c17, d[4]));
  const VN o1 = vfnmadd(c4, vadd(d[1], d[5]), vmul(c17, d[3]));
  t[1] = vadd(e1, o1);
  t[2] = vsub(e1, o1);
  // rows 3, 4: e = 2 (4 d2 - 5 d4 + d6), o = 4 d1 - 5 d3 + d5
  const VN e3 = vfmadd(c4, d[2], vfnmadd(c5, d[4], d[6]));
  const VN o3 = vfmadd(c4, d[1], vfnmadd(c5, d[3], d[5]));
  t[3] = vfmadd(c2, e3, o3);
  t[4] = vfmsub(c2, e3, o3);
  // rows 5, 6: e = d2 - 5 d4 + 4 d6, o = 2 (d1 - 5 d3 + 4 d5)
  const VN e5 = vfmadd(c4, d[6], vfnmadd(c5, d[4], d[2]));
  const VN o5 = vfmadd(c4, d[5], vfnmadd(c5, d[3], d[1]));
  t[5] = vfmadd(c2, o5, e5);
  t[6] = vfnmadd(c2, o5, e5);
}

// y = A^T m for one column of 8 vectors.
inline void at8(const VN m[8], VN y[4]) {
  const VN s12 = vadd(m[1], m[2]), d12 = vsub(m[1], m[2]);
  const VN s34 = vadd(m[3], m[4]), d34 = vsub(m[3], m[4]);
  const VN s56 = vadd(m[5], m[6]), d56 = vsub(m[5], m[6]);
  y[0] = vadd(vadd(m[0], s12), vadd(s34, s56));
  y[1] = vfmadd(vset1(0.5f), d34, vfmadd(vset1(2.0f), d56, d12));
  y[2] = vfmadd(vset1(0.25f), s34, vfmadd(vset1(4.0f), s56, s12));
  y[3] = vadd(vfmadd(vset1(0.125f), d34, vfmadd(vset1(8.0f), d56, d12)), m[7]);
}

// Vectors of tmp input_transform_row needs for nt tiles.
inline int64_t input_row_tmp_vecs(int64_t nt) { return 8 * (4 * nt + 4); }

// v[pos * stride + t * 16] = B^T d B for nt horizontally adjacent 8x8 tiles
// (x at the first, row pitch `pitch` floats). Adjacent tiles share 4 of their 8 columns, so B^T
// runs once per input column rather than once per tile column.
inline void input_transform_row(const float* x, int64_t pitch, int64_t nt, float* v, int64_t stride,
                                float* tmp) {
  const int64_t cols = 4 * nt + 4;
  for (int h = 0; h < kHalves; ++h) {
    for (int64_t j = 0; j < cols; ++j) {
      VN d[8], t[8];
      for (int i = 0; i < 8; ++i) d[i] = vload(x + i * pitch + j * 16 + h * kN);
      bt8(d, t);
      for (int i = 0; i < 8; ++i) vstore(tmp + (i * cols + j) * 16 + h * kN, t[i]);
    }
    for (int64_t tile = 0; tile < nt; ++tile)
      for (int i = 0; i < 8; ++i) {
        VN r[8], o[8];
        for (int j = 0; j < 8; ++j) r[j] = vload(tmp + (i * cols + 4 * tile + j) * 16 + h * kN);
        bt8(r, o);
        for (int j = 0; j < 8; ++j) vstore(v + (i * 8 + j) * stride + tile * 16 + h * kN, o[j]);
      }
  }
}

// e = A y for one column of 4 vectors (A = (A^T)^T, 8x4): the transpose of
// at8, used to carry output gradients into the transformed domain.
inline void a8(const VN y[4], VN e[8]) {
  e[0] = y[0];
  e[7] = y[3];
  const VN ev1 = vadd(y[0], y[2]), od1 = vadd(y[1], y[3]);
  e[1] = vadd(ev1, od1);
  e[2] = vsub(ev1, od1);
  const VN ev3 = vfmadd(vset1(0.25f), y[2], y[0]);
  const VN od3 = vfmadd(vset1(0.125f), y[3], vmul(vset1(0.5f), y[1]));
  e[3] = vadd(ev3, od3);
  e[4] = vsub(ev3, od3);
  const VN ev5 = vfmadd(vset1(4.0f), y[2], y[0]);
  const VN od5 = vfmadd(vset1(8.0f), y[3], vmul(vset1(2.0f), y[1]));
  e[5] = vadd(ev5, od5);
  e[6] = vsub(ev5, od5);
}

// e = B v for one column of 8 vectors (B = (B^T)^T): the transpose of bt8,
// used to carry transformed gradients back to input tiles.
inline void b8(const VN v[8], VN e[8]) {
  const VN c2 = vset1(2.0f), c4 = vset1(4.0f), c5 = vset1(5.0f);
  const VN c8 = vset1(8.0f), c10 = vset1(10.0f);
  const VN c17 = vset1(17.0f), c21 = vset1(21.0f);
  const VN p1 = vadd(v[1], v[2]), m1 = vsub(v[1], v[2]);
  const VN p3 = vadd(v[3], v[4]), m3 = vsub(v[3], v[4]);
  const VN p5 = vadd(v[5], v[6]), m5 = vsub(v[5], v[6]);
  e[0] = vmul(c4, v[0]);
  e[7] = vmul(c4, v[7]);
  // e1 = -4 m1 + 4 m3 + 2 m5 - 4 v7
  e[1] = vfmadd(c4, vsub(m3, vadd(m1, v[7])), vmul(c2, m5));
  // e2 = -21 v0 - 4 p1 + 8 p3 + p5
  e[2] = vfnmadd(c21, v[0], vfnmadd(c4, p1, vfmadd(c8, p3, p5)));
  // e3 = 17 m1 - 5 m3 - 10 m5 + 21 v7
  e[3] = vfmadd(c17, m1, vfnmadd(c5, m3, vfnmadd(c10, m5, vmul(c21, v[7]))));
  // e4 = 21 v0 + 17 p1 - 10 p3 - 5 p5
  e[4] = vfmadd(c21, v[0], vfmsub(c17, p1, vfmadd(c10, p3, vmul(c5, p5))));
  // e5 = -4 m1 + m3 + 8 m5 - 21 v7
  e[5] = vfnmadd(c4, m1, vfmadd(c8, m5, vfnmadd(c21, v[7], m3)));
  // e6 = -4 v0 - 4 p1 + 2 p3 + 4 p5
  e[6] = vfmadd(c4, vsub(p5, vadd(v[0], p1)), vmul(c2, p3));
}

// d[pos * stride] = A dY A^T for the 4x4 block at dy (row pitch `pitch`
// floats), in registers: the 16 inputs stay loaded, and each pair of rows
// (+p, -p) of A dY is formed from shared even and odd parts.
inline void grad_transform_half(const float* dy, int64_t pitch, float* d, int64_t stride) {
  VN y[4][4];
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 4; ++l) y[k][l] = vload(dy + k * pitch + l * 16);
  const VN c2 = vset1(2.0f), c4 = vset1(4.0f), c8 = vset1(8.0f);
  const VN h = vset1(0.5f), q = vset1(0.25f), e8 = vset1(0.125f);
  auto row_out = [&](int i, const VN r[4]) {
    VN e[8];
    a8(r, e);
    for (int j = 0; j < 8; ++j) vstore(d + (i * 8 + j) * stride, e[j]);
  };
  VN r[4], s[4];
  row_out(0, y[0]);
  row_out(7, y[3]);
  for (int l = 0; l < 4; ++l) {  // rows 1, 2: (y0 + y2) +- (y1 + y3)
    const VN ev = vadd(y[0][l], y[2][l]), od = vadd(y[1][l], y[3][l]);
    r[l] = vadd(ev, od);
    s[l] = vsub(ev, od);
  }
  row_out(1, r);
  row_out(2, s);
  for (int l = 0; l < 4; ++l) {  // rows 3, 4: (y0 + y2 / 4) +- (y1 / 2 + y3 / 8)
    const VN ev = vfmadd(q, y[2][l], y[0][l]);
    const VN od = vfmadd(e8, y[3][l], vmul(h, y[1][l]));
    r[l] = vadd(ev, od);
    s[l] = vsub(ev, od);
  }
  row_out(3, r);
  row_out(4, s);
  for (int l = 0; l < 4; ++l) {  // rows 5, 6: (y0 + 4 y2) +- (2 y1 + 8 y3)
    const VN ev = vfmadd(c4, y[2][l], y[0][l]);
    const VN od = vfmadd(c8, y[3][l], vmul(c2, y[1][l]));
    r[l] = vadd(ev, od);
    s[l] = vsub(ev, od);
  }
  row_out(5, r);
  row_out(6, s);
}

inline void grad_transform(const float* dy, int64_t pitch, float* d, int64_t stride) {
  for (int h = 0; h < kHalves; ++h) grad_transform_half(dy + h * kN, pitch, d + h * kN, stride);
}

}  // namespace cohort::kernels::detail::COHORT_ISA_NS::winograd
