// Internal to the Winograd conv2d kernels: the F(4, 5) transform matrices
// and the vectorized transforms shared by the forward and weight-gradient
// passes. Each __m512 holds one element for 16 samples (batch-16 layout).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace cohort::kernels::detail::winograd {

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
inline void bt8(const __m512 d[8], __m512 t[8]) {
  const __m512 c2 = _mm512_set1_ps(2.0f), c4 = _mm512_set1_ps(4.0f), c5 = _mm512_set1_ps(5.0f);
  const __m512 c17 = _mm512_set1_ps(17.0f), c21 = _mm512_set1_ps(21.0f);
  t[0] =
      _mm512_fmadd_ps(c4, _mm512_sub_ps(d[0], d[6]), _mm512_mul_ps(c21, _mm512_sub_ps(d[4], d[2])));
  t[7] =
      _mm512_fmadd_ps(c4, _mm512_sub_ps(d[7], d[1]), _mm512_mul_ps(c21, _mm512_sub_ps(d[3], d[5])));
  // rows 1, 2: e = 17 d4 - 4 (d2 + d6), o = 17 d3 - 4 (d1 + d5)
  const __m512 e1 = _mm512_fnmadd_ps(c4, _mm512_add_ps(d[2], d[6]), _mm512_mul_ps(c17, d[4]));
  const __m512 o1 = _mm512_fnmadd_ps(c4, _mm512_add_ps(d[1], d[5]), _mm512_mul_ps(c17, d[3]));
  t[1] = _mm512_add_ps(e1, o1);
  t[2] = _mm512_sub_ps(e1, o1);
  // rows 3, 4: e = 2 (4 d2 - 5 d4 + d6), o = 4 d1 - 5 d3 + d5
  const __m512 e3 = _mm512_fmadd_ps(c4, d[2], _mm512_fnmadd_ps(c5, d[4], d[6]));
  const __m512 o3 = _mm512_fmadd_ps(c4, d[1], _mm512_fnmadd_ps(c5, d[3], d[5]));
  t[3] = _mm512_fmadd_ps(c2, e3, o3);
  t[4] = _mm512_fmsub_ps(c2, e3, o3);
  // rows 5, 6: e = d2 - 5 d4 + 4 d6, o = 2 (d1 - 5 d3 + 4 d5)
  const __m512 e5 = _mm512_fmadd_ps(c4, d[6], _mm512_fnmadd_ps(c5, d[4], d[2]));
  const __m512 o5 = _mm512_fmadd_ps(c4, d[5], _mm512_fnmadd_ps(c5, d[3], d[1]));
  t[5] = _mm512_fmadd_ps(c2, o5, e5);
  t[6] = _mm512_fnmadd_ps(c2, o5, e5);
}

// y = A^T m for one column of 8 vectors.
inline void at8(const __m512 m[8], __m512 y[4]) {
  const __m512 s12 = _mm512_add_ps(m[1], m[2]), d12 = _mm512_sub_ps(m[1], m[2]);
  const __m512 s34 = _mm512_add_ps(m[3], m[4]), d34 = _mm512_sub_ps(m[3], m[4]);
  const __m512 s56 = _mm512_add_ps(m[5], m[6]), d56 = _mm512_sub_ps(m[5], m[6]);
  y[0] = _mm512_add_ps(_mm512_add_ps(m[0], s12), _mm512_add_ps(s34, s56));
  y[1] =
      _mm512_fmadd_ps(_mm512_set1_ps(0.5f), d34, _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d56, d12));
  y[2] =
      _mm512_fmadd_ps(_mm512_set1_ps(0.25f), s34, _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s56, s12));
  y[3] = _mm512_add_ps(
      _mm512_fmadd_ps(_mm512_set1_ps(0.125f), d34, _mm512_fmadd_ps(_mm512_set1_ps(8.0f), d56, d12)),
      m[7]);
}

// v[pos * stride] = B^T d B for the 8x8 tile at x (row pitch `pitch` floats);
// tmp holds 64 vectors.
// Vectors of tmp input_transform_row needs for nt tiles.
inline int64_t input_row_tmp_vecs(int64_t nt) { return 8 * (4 * nt + 4); }

// input_transform for nt horizontally adjacent tiles (x at the first; tile t
// goes to v + t * 16). Adjacent tiles share 4 of their 8 columns, so B^T runs
// once per input column rather than once per tile column.
inline void input_transform_row(const float* x, int64_t pitch, int64_t nt, float* v, int64_t stride,
                                float* tmp) {
  const int64_t cols = 4 * nt + 4;
  for (int64_t j = 0; j < cols; ++j) {
    __m512 d[8], t[8];
    for (int i = 0; i < 8; ++i) d[i] = _mm512_load_ps(x + i * pitch + j * 16);
    bt8(d, t);
    for (int i = 0; i < 8; ++i) _mm512_store_ps(tmp + (i * cols + j) * 16, t[i]);
  }
  for (int64_t tile = 0; tile < nt; ++tile)
    for (int i = 0; i < 8; ++i) {
      __m512 r[8], o[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm512_load_ps(tmp + (i * cols + 4 * tile + j) * 16);
      bt8(r, o);
      for (int j = 0; j < 8; ++j) _mm512_store_ps(v + (i * 8 + j) * stride + tile * 16, o[j]);
    }
}

inline void input_transform(const float* x, int64_t pitch, float* v, int64_t stride, float* tmp) {
  for (int j = 0; j < 8; ++j) {
    __m512 d[8], t[8];
    for (int i = 0; i < 8; ++i) d[i] = _mm512_load_ps(x + i * pitch + j * 16);
    bt8(d, t);
    for (int i = 0; i < 8; ++i) _mm512_store_ps(tmp + (i * 8 + j) * 16, t[i]);
  }
  for (int i = 0; i < 8; ++i) {
    __m512 r[8], o[8];
    for (int j = 0; j < 8; ++j) r[j] = _mm512_load_ps(tmp + (i * 8 + j) * 16);
    bt8(r, o);
    for (int j = 0; j < 8; ++j) _mm512_store_ps(v + (i * 8 + j) * stride, o[j]);
  }
}

// e = A y for one column of 4 vectors (A = (A^T)^T, 8x4): the transpose of
// at8, used to carry output gradients into the transformed domain.
inline void a8(const __m512 y[4], __m512 e[8]) {
  e[0] = y[0];
  e[7] = y[3];
  const __m512 ev1 = _mm512_add_ps(y[0], y[2]), od1 = _mm512_add_ps(y[1], y[3]);
  e[1] = _mm512_add_ps(ev1, od1);
  e[2] = _mm512_sub_ps(ev1, od1);
  const __m512 ev3 = _mm512_fmadd_ps(_mm512_set1_ps(0.25f), y[2], y[0]);
  const __m512 od3 =
      _mm512_fmadd_ps(_mm512_set1_ps(0.125f), y[3], _mm512_mul_ps(_mm512_set1_ps(0.5f), y[1]));
  e[3] = _mm512_add_ps(ev3, od3);
  e[4] = _mm512_sub_ps(ev3, od3);
  const __m512 ev5 = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), y[2], y[0]);
  const __m512 od5 =
      _mm512_fmadd_ps(_mm512_set1_ps(8.0f), y[3], _mm512_mul_ps(_mm512_set1_ps(2.0f), y[1]));
  e[5] = _mm512_add_ps(ev5, od5);
  e[6] = _mm512_sub_ps(ev5, od5);
}

// e = B v for one column of 8 vectors (B = (B^T)^T): the transpose of bt8,
// used to carry transformed gradients back to input tiles.
inline void b8(const __m512 v[8], __m512 e[8]) {
  const __m512 c2 = _mm512_set1_ps(2.0f), c4 = _mm512_set1_ps(4.0f), c5 = _mm512_set1_ps(5.0f);
  const __m512 c8 = _mm512_set1_ps(8.0f), c10 = _mm512_set1_ps(10.0f);
  const __m512 c17 = _mm512_set1_ps(17.0f), c21 = _mm512_set1_ps(21.0f);
  const __m512 p1 = _mm512_add_ps(v[1], v[2]), m1 = _mm512_sub_ps(v[1], v[2]);
  const __m512 p3 = _mm512_add_ps(v[3], v[4]), m3 = _mm512_sub_ps(v[3], v[4]);
  const __m512 p5 = _mm512_add_ps(v[5], v[6]), m5 = _mm512_sub_ps(v[5], v[6]);
  e[0] = _mm512_mul_ps(c4, v[0]);
  e[7] = _mm512_mul_ps(c4, v[7]);
  // e1 = -4 m1 + 4 m3 + 2 m5 - 4 v7
  e[1] = _mm512_fmadd_ps(c4, _mm512_sub_ps(m3, _mm512_add_ps(m1, v[7])), _mm512_mul_ps(c2, m5));
  // e2 = -21 v0 - 4 p1 + 8 p3 + p5
  e[2] = _mm512_fnmadd_ps(c21, v[0], _mm512_fnmadd_ps(c4, p1, _mm512_fmadd_ps(c8, p3, p5)));
  // e3 = 17 m1 - 5 m3 - 10 m5 + 21 v7
  e[3] = _mm512_fmadd_ps(
      c17, m1, _mm512_fnmadd_ps(c5, m3, _mm512_fnmadd_ps(c10, m5, _mm512_mul_ps(c21, v[7]))));
  // e4 = 21 v0 + 17 p1 - 10 p3 - 5 p5
  e[4] = _mm512_fmadd_ps(c21, v[0],
                         _mm512_fmsub_ps(c17, p1, _mm512_fmadd_ps(c10, p3, _mm512_mul_ps(c5, p5))));
  // e5 = -4 m1 + m3 + 8 m5 - 21 v7
  e[5] = _mm512_fnmadd_ps(c4, m1, _mm512_fmadd_ps(c8, m5, _mm512_fnmadd_ps(c21, v[7], m3)));
  // e6 = -4 v0 - 4 p1 + 2 p3 + 4 p5
  e[6] = _mm512_fmadd_ps(c4, _mm512_sub_ps(p5, _mm512_add_ps(v[0], p1)), _mm512_mul_ps(c2, p3));
}

// d[pos * stride] = A dY A^T for the 4x4 block at dy (row pitch `pitch`
// floats), in registers: the 16 inputs stay loaded, and each pair of rows
// (+p, -p) of A dY is formed from shared even and odd parts.
inline void grad_transform(const float* dy, int64_t pitch, float* d, int64_t stride) {
  __m512 y[4][4];
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 4; ++l) y[k][l] = _mm512_load_ps(dy + k * pitch + l * 16);
  const __m512 c2 = _mm512_set1_ps(2.0f), c4 = _mm512_set1_ps(4.0f), c8 = _mm512_set1_ps(8.0f);
  const __m512 h = _mm512_set1_ps(0.5f), q = _mm512_set1_ps(0.25f), e8 = _mm512_set1_ps(0.125f);
  auto row_out = [&](int i, const __m512 r[4]) {
    __m512 e[8];
    a8(r, e);
    for (int j = 0; j < 8; ++j) _mm512_store_ps(d + (i * 8 + j) * stride, e[j]);
  };
  __m512 r[4], s[4];
  row_out(0, y[0]);
  row_out(7, y[3]);
  for (int l = 0; l < 4; ++l) {  // rows 1, 2: (y0 + y2) +- (y1 + y3)
    const __m512 ev = _mm512_add_ps(y[0][l], y[2][l]), od = _mm512_add_ps(y[1][l], y[3][l]);
    r[l] = _mm512_add_ps(ev, od);
    s[l] = _mm512_sub_ps(ev, od);
  }
  row_out(1, r);
  row_out(2, s);
  for (int l = 0; l < 4; ++l) {  // rows 3, 4: (y0 + y2 / 4) +- (y1 / 2 + y3 / 8)
    const __m512 ev = _mm512_fmadd_ps(q, y[2][l], y[0][l]);
    const __m512 od = _mm512_fmadd_ps(e8, y[3][l], _mm512_mul_ps(h, y[1][l]));
    r[l] = _mm512_add_ps(ev, od);
    s[l] = _mm512_sub_ps(ev, od);
  }
  row_out(3, r);
  row_out(4, s);
  for (int l = 0; l < 4; ++l) {  // rows 5, 6: (y0 + 4 y2) +- (2 y1 + 8 y3)
    const __m512 ev = _mm512_fmadd_ps(c4, y[2][l], y[0][l]);
    const __m512 od = _mm512_fmadd_ps(c8, y[3][l], _mm512_mul_ps(c2, y[1][l]));
    r[l] = _mm512_add_ps(ev, od);
    s[l] = _mm512_sub_ps(ev, od);
  }
  row_out(5, r);
  row_out(6, s);
}

}  // namespace cohort::kernels::detail::winograd
