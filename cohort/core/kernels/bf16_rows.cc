#include "cohort/core/kernels/bf16_rows.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/core/kernels/transformer_rows.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::kernels {

using detail::ColumnSums;

namespace {

void check_rows(const Tensor& t, DType dtype, const char* op, const char* what) {
  COHORT_CHECK(t.dim() == 2 && t.dtype() == dtype, "{}: {} must be a 2-D {} tensor, got {} {}", op,
               what, dtype_name(dtype), dtype_name(t.dtype()), shape_str(t.sizes()));
}

// fn(part, row, sums) for every row, split over threads in contiguous parts;
// sums (null unless need_sums) is the part's float block, flushed every
// ColumnSums::kFlushRows rows. Returns the column sums (or undefined).
template <typename Fn>
Tensor over_rows(int64_t rows, int64_t n, bool need_sums, Fn fn) {
  const int64_t parts = detail::row_parts(rows, 16);
  ColumnSums sums(need_sums ? parts : 0, n);
  detail::for_row_parts(rows, parts, [&](int64_t part, int64_t r0, int64_t r1) {
    for (int64_t b0 = r0; b0 < r1; b0 += ColumnSums::kFlushRows) {
      const int64_t b1 = std::min(b0 + ColumnSums::kFlushRows, r1);
      float* acc = need_sums ? sums.block(part) : nullptr;
      for (int64_t row = b0; row < b1; ++row) fn(row, acc);
      if (need_sums) sums.flush(part);
    }
  });
  if (!need_sums) return Tensor();
  return rows ? sums.result({n}) : Tensor::zeros({n}, kFloat32);
}

}  // namespace

DeviceOp<Bf16Rows(const Tensor&, bool)> to_bf16_with_column_sums_device("to_bf16_with_column_sums");
DeviceOp<GeluBf16(const Tensor&, const Tensor&, const Tensor&)> linear_gelu_tanh_bf16_device(
    "linear_gelu_tanh_bf16");
DeviceOp<Bf16Rows(const Tensor&, const Tensor&, bool)> gelu_tanh_backward_bf16_device(
    "gelu_tanh_backward_bf16");
DeviceOp<Bf16Rows(const Tensor&, const Tensor&, const Tensor&, bool)>
    gelu_tanh_backward_through_linear_bf16_device("gelu_tanh_backward_through_linear_bf16");

Bf16Rows to_bf16_with_column_sums(const Tensor& g_in, bool need_sums) {
  check_rows(g_in, kFloat32, "to_bf16_with_column_sums", "input");
  if (Device d = g_in.device(); !d.is_cpu())
    return to_bf16_with_column_sums_device(d, g_in, need_sums);
  Tensor g = g_in.contiguous();
  const int64_t rows = g.sizes()[0], n = g.sizes()[1];
  Bf16Rows r{Tensor::empty({rows, n}, kBFloat16), Tensor()};
  const float* pg = g.data_ptr<float>();
  BFloat16* py = r.rounded.data_ptr<BFloat16>();
  const auto& k = detail::transformer_rows();
  r.sums = over_rows(rows, n, need_sums, [&](int64_t row, float* acc) {
    const float* x = pg + row * n;
    native::to_bf16(x, py + row * n, n);
    if (acc) k.add_to(x, acc, n);
  });
  return r;
}

GeluBf16 linear_gelu_tanh_bf16(const Tensor& x16, const Tensor& w16, const Tensor& b,
                               native::Bf16Path path) {
  COHORT_CHECK(x16.dim() >= 1 && w16.dim() == 2 && x16.size(-1) == w16.sizes()[1],
               "linear_gelu_tanh_bf16: input {} does not match weight {} (want [..., in] and "
               "[out, in])",
               shape_str(x16.sizes()), shape_str(w16.sizes()));
  if (Device d = op_device("linear_gelu_tanh_bf16", {&x16, &w16, &b}); !d.is_cpu())
    return linear_gelu_tanh_bf16_device(d, x16, w16, b);
  const int64_t n = w16.sizes()[0];
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x16.dim(); ++d) rows *= x16.size(d);
  GeluBf16 r{Tensor(), Tensor::empty({rows, n}, kBFloat16), Tensor::empty({rows, n}, kBFloat16)};
  BFloat16* p16 = r.pre16.data_ptr<BFloat16>();
  BFloat16* o16 = r.out16.data_ptr<BFloat16>();
  const auto& k = detail::transformer_rows();
  // Each block's pre becomes out in place once pre16 is taken from it.
  r.out = native::linear_bf16(x16, w16, b, path,
                              [&](float* y, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
                                for (int64_t row = r0; row < r1; ++row) {
                                  float* seg = y + row * n + c0;
                                  const int64_t at = row * n + c0, len = c1 - c0;
                                  native::to_bf16(seg, p16 + at, len);
                                  k.gelu_tanh(seg, seg, len);
                                  native::to_bf16(seg, o16 + at, len);
                                }
                              });
  r.out = r.out.reshape({rows, n});
  return r;
}

Bf16Rows gelu_tanh_backward_bf16(const Tensor& g_in, const Tensor& pre16_in, bool need_sums) {
  check_rows(g_in, kFloat32, "gelu_tanh_backward_bf16", "grad");
  check_rows(pre16_in, kBFloat16, "gelu_tanh_backward_bf16", "pre16");
  COHORT_CHECK(g_in.sizes() == pre16_in.sizes(),
               "gelu_tanh_backward_bf16: grad {} and pre16 {} differ", shape_str(g_in.sizes()),
               shape_str(pre16_in.sizes()));
  if (Device d = op_device("gelu_tanh_backward_bf16", {&g_in, &pre16_in}); !d.is_cpu())
    return gelu_tanh_backward_bf16_device(d, g_in, pre16_in, need_sums);
  Tensor g = g_in.contiguous(), pre16 = pre16_in.contiguous();
  const int64_t rows = g.sizes()[0], n = g.sizes()[1];
  Bf16Rows r{Tensor::empty({rows, n}, kBFloat16), Tensor()};
  const float* pg = g.data_ptr<float>();
  const BFloat16* pp = pre16.data_ptr<BFloat16>();
  BFloat16* pd = r.rounded.data_ptr<BFloat16>();
  const auto& k = detail::transformer_rows();
  r.sums = over_rows(rows, n, need_sums, [&](int64_t row, float* acc) {
    // One row of pre widened and of dh in float32, on this thread's scratch.
    thread_local ThreadBuffer pre_buf, dh_buf;
    const ThreadBufferUse<float> pre(pre_buf, n), dh(dh_buf, n);
    native::bf16_to_float(pp + row * n, pre.data(), n);
    k.gelu_tanh_backward(pg + row * n, pre.data(), dh.data(), acc, n);
    native::to_bf16(dh.data(), pd + row * n, n);
  });
  return r;
}

Bf16Rows gelu_tanh_backward_through_linear_bf16(const Tensor& g16, const Tensor& w16,
                                                const Tensor& pre16_in, bool need_sums,
                                                native::Bf16Path path) {
  const char* op = "gelu_tanh_backward_through_linear_bf16";
  check_rows(g16, kBFloat16, op, "grad");
  check_rows(w16, kBFloat16, op, "weight");
  check_rows(pre16_in, kBFloat16, op, "pre16");
  const int64_t rows = g16.sizes()[0], n = w16.sizes()[1];
  COHORT_CHECK(g16.sizes()[1] == w16.sizes()[0] && pre16_in.sizes() == Shape({rows, n}),
               "{}: grad {}, weight {} and pre16 {} do not match (want [rows, out], [out, n] "
               "and [rows, n])",
               op, shape_str(g16.sizes()), shape_str(w16.sizes()), shape_str(pre16_in.sizes()));
  if (Device d = op_device(op, {&g16, &w16, &pre16_in}); !d.is_cpu())
    return gelu_tanh_backward_through_linear_bf16_device(d, g16, w16, pre16_in, need_sums);
  Tensor pre16 = pre16_in.contiguous();
  Bf16Rows r{Tensor::empty({rows, n}, kBFloat16), Tensor()};
  const BFloat16* pp = pre16.data_ptr<BFloat16>();
  BFloat16* pd = r.rounded.data_ptr<BFloat16>();
  const auto& k = detail::transformer_rows();
  // Each block's column sums, in float over kFlushRows rows at a time, then
  // double; added up in the order of the blocks' rows and columns.
  struct BlockSums {
    int64_t r0, c0;
    std::vector<double> sums;
  };
  std::vector<BlockSums> blocks;
  std::mutex mu;
  // g16 (w16^T)^T = g16 w16: w16's transpose as linear_bf16's [n, out] weight.
  native::linear_bf16(
      g16, w16.transpose(0, 1), Tensor(), path,
      [&](float* y, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        const int64_t len = c1 - c0;
        thread_local ThreadBuffer pre_buf, dh_buf, acc_buf;
        const ThreadBufferUse<float> pre(pre_buf, len), dh(dh_buf, len), acc(acc_buf, len);
        BlockSums bs{r0, c0, {}};
        if (need_sums) {
          std::fill_n(acc.data(), len, 0.0f);
          bs.sums.assign(len, 0.0);
        }
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t at = row * n + c0;
          native::bf16_to_float(pp + at, pre.data(), len);
          k.gelu_tanh_backward(y + at, pre.data(), dh.data(), need_sums ? acc.data() : nullptr,
                               len);
          native::to_bf16(dh.data(), pd + at, len);
          if (need_sums && ((row - r0 + 1) % ColumnSums::kFlushRows == 0 || row + 1 == r1))
            for (int64_t i = 0; i < len; ++i) {
              bs.sums[i] += acc[i];
              acc[i] = 0.0f;
            }
        }
        if (!need_sums) return;
        std::lock_guard<std::mutex> lock(mu);
        blocks.push_back(std::move(bs));
      });
  if (!need_sums) return r;
  std::sort(blocks.begin(), blocks.end(), [](const BlockSums& a, const BlockSums& b) {
    return a.r0 != b.r0 ? a.r0 < b.r0 : a.c0 < b.c0;
  });
  std::vector<double> total(static_cast<size_t>(n), 0.0);
  for (const BlockSums& b : blocks)
    for (size_t i = 0; i < b.sums.size(); ++i) total[b.c0 + i] += b.sums[i];
  r.sums = Tensor::from_vector(total, {n}).to(kFloat32);
  return r;
}

}  // namespace cohort::kernels
