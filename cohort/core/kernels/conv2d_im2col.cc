// General convolution path: im2col + single-threaded sgemm per sample, the
// batch split over the caller's thread budget. Used for geometries the
// batch-16 direct path does not cover (small batches, strided backward-input).
#include "cohort/core/kernels/conv2d_im2col.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "cohort/base/parallel.h"

namespace cohort::kernels::detail {
namespace {

// OpenBLAS runs one thread per call: parallelism comes from our own
// parallel_for, so that concurrent callers do not oversubscribe the cores.
void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// col [C*KH*KW, OH*OW] from one sample's x [C, H, W]; padding reads as 0.
void im2col(const Conv2dGeometry& g, const float* x, float* col) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t c = 0; c < g.in_channels; ++c)
    for (int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * oh_n * ow_n;
        for (int64_t oh = 0; oh < oh_n; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + kh;
          float* out = row + oh * ow_n;
          if (ih < 0 || ih >= g.in_h) {
            std::fill(out, out + ow_n, 0.0f);
            continue;
          }
          const float* in = x + (c * g.in_h + ih) * g.in_w;
          for (int64_t ow = 0; ow < ow_n; ++ow) {
            const int64_t iw = ow * g.stride_w - g.pad_w + kw;
            out[ow] = (iw >= 0 && iw < g.in_w) ? in[iw] : 0.0f;
          }
        }
      }
}

// dx [C, H, W] += scatter of col [C*KH*KW, OH*OW]; dx must be zeroed first.
void col2im(const Conv2dGeometry& g, const float* col, float* dx) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t c = 0; c < g.in_channels; ++c)
    for (int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * oh_n * ow_n;
        for (int64_t oh = 0; oh < oh_n; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + kh;
          if (ih < 0 || ih >= g.in_h) continue;
          float* out = dx + (c * g.in_h + ih) * g.in_w;
          const float* in = row + oh * ow_n;
          for (int64_t ow = 0; ow < ow_n; ++ow) {
            const int64_t iw = ow * g.stride_w - g.pad_w + kw;
            if (iw >= 0 && iw < g.in_w) out[iw] += in[ow];
          }
        }
      }
}

}  // namespace

void im2col_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                    bool relu, float* y) {
  blas_single_threaded();
  const int64_t ckk = g.in_channels * g.kernel_h * g.kernel_w;
  const int64_t p = g.out_h() * g.out_w();
  const int64_t x_stride = g.in_channels * g.in_h * g.in_w, y_stride = g.out_channels * p;
  parallel_for(0, g.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> col(ckk * p);
    for (int64_t n = b0; n < b1; ++n) {
      float* yn = y + n * y_stride;
      im2col(g, x + n * x_stride, col.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.out_channels, p, ckk, 1.0f, w, ckk,
                  col.data(), p, 0.0f, yn, p);
      for (int64_t oc = 0; oc < g.out_channels; ++oc) {
        float* row = yn + oc * p;
        const float b = bias ? bias[oc] : 0.0f;
        if (relu) {
          for (int64_t i = 0; i < p; ++i) row[i] = std::max(row[i] + b, 0.0f);
        } else if (bias) {
          for (int64_t i = 0; i < p; ++i) row[i] += b;
        }
      }
    }
  });
}

void im2col_backward_input(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  blas_single_threaded();
  const int64_t ckk = g.in_channels * g.kernel_h * g.kernel_w;
  const int64_t p = g.out_h() * g.out_w();
  const int64_t x_stride = g.in_channels * g.in_h * g.in_w, y_stride = g.out_channels * p;
  parallel_for(0, g.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> col(ckk * p);
    for (int64_t n = b0; n < b1; ++n) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, p, g.out_channels, 1.0f, w, ckk,
                  dy + n * y_stride, p, 0.0f, col.data(), p);
      float* dxn = dx + n * x_stride;
      std::fill(dxn, dxn + x_stride, 0.0f);
      col2im(g, col.data(), dxn);
    }
  });
}

void im2col_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                            float* dbias) {
  blas_single_threaded();
  const int64_t ckk = g.in_channels * g.kernel_h * g.kernel_w;
  const int64_t p = g.out_h() * g.out_w();
  const int64_t x_stride = g.in_channels * g.in_h * g.in_w, y_stride = g.out_channels * p;
  const int64_t wsize = g.out_channels * ckk;
  // One partial dw per chunk of the batch, summed at the end in a fixed order
  // so the result does not depend on thread timing.
  const int64_t chunks = std::min<int64_t>(std::max(1, num_threads()), g.batch);
  std::vector<float> partial(chunks * wsize);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> col(ckk * p);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t n0 = g.batch * c / chunks, n1 = g.batch * (c + 1) / chunks;
      float* acc = partial.data() + c * wsize;
      for (int64_t n = n0; n < n1; ++n) {
        im2col(g, x + n * x_stride, col.data());
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.out_channels, ckk, p, 1.0f,
                    dy + n * y_stride, p, col.data(), p, n == n0 ? 0.0f : 1.0f, acc, ckk);
      }
    }
  });
  std::copy(partial.begin(), partial.begin() + wsize, dw);
  for (int64_t c = 1; c < chunks; ++c)
    for (int64_t i = 0; i < wsize; ++i) dw[i] += partial[c * wsize + i];
  if (dbias) {
    for (int64_t oc = 0; oc < g.out_channels; ++oc) {
      float s = 0.0f;
      for (int64_t n = 0; n < g.batch; ++n) {
        const float* row = dy + n * y_stride + oc * p;
        for (int64_t i = 0; i < p; ++i) s += row[i];
      }
      dbias[oc] = s;
    }
  }
}

}  // namespace cohort::kernels::detail
