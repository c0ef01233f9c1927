#include "cohort/core/kernels/gelu.h"

#include <algorithm>
#include <type_traits>

#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"
#include "cohort/core/kernels/transformer_rows.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/reduce.h"

namespace cohort::kernels {
namespace {

using detail::transformer_rows;

// Elements per parallel_for chunk of the elementwise loops.
constexpr int64_t kGrain = 1 << 14;

// Rows per GEMM call in linear_gelu: the block's output (rows x out floats,
// about 512 KB) stays in L2 for the epilogue; but each call re-packs the
// weight (in x out floats, from L3 or memory for GPT-2's 9 MB MLP weight), so
// a block holds at least in x out / 16384 rows to keep that under a few per
// cent. Measured (bench_transformer_ops, 2-core AMD EPYC): 32-row blocks cost
// 1.3-1.7x at out = 3072; 64 to 256 rows and one GEMM per thread are within
// noise at the reference size.
int64_t gelu_block_rows(int64_t in_features, int64_t out_features) {
  const int64_t for_cache = (int64_t{1} << 17) / std::max<int64_t>(out_features, 1);
  const int64_t for_packing = in_features * out_features / (int64_t{1} << 14);
  return std::clamp<int64_t>(std::max(for_cache, for_packing) / 16 * 16, 64, 512);
}

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  COHORT_CHECK(w.dim() == 2, "linear_gelu: weight must be 2-D [out, in], got {}",
               shape_str(w.sizes()));
  COHORT_CHECK(x.dim() >= 1 && x.size(-1) == w.sizes()[1],
               "linear_gelu: input {} does not match weight {} (last dim must be {})",
               shape_str(x.sizes()), shape_str(w.sizes()), w.sizes()[1]);
  COHORT_CHECK(x.dtype() == w.dtype(), "linear_gelu: input dtype {} differs from weight dtype {}",
               dtype_name(x.dtype()), dtype_name(w.dtype()));
  if (b.defined())
    COHORT_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0],
                 "linear_gelu: bias must be [{}], got {}", w.sizes()[0], shape_str(b.sizes()));
}

}  // namespace

DeviceOp<Tensor(const Tensor&)> gelu_tanh_device("gelu");
DeviceOp<Tensor(const Tensor&, const Tensor&)> gelu_tanh_backward_device("gelu_backward");
DeviceOp<LinearGeluResult(const Tensor&, const Tensor&, const Tensor&)> linear_gelu_device(
    "linear_gelu");
DeviceOp<LinearGeluGrads(const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, bool,
                         bool)>
    linear_gelu_backward_device("linear_gelu_backward");

Tensor gelu_tanh(const Tensor& x_in) {
  if (Device d = op_device("gelu", {&x_in}); !d.is_cpu()) return gelu_tanh_device(d, x_in);
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.sizes(), x.dtype());
  dispatch_floating(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    T* py = y.data_ptr<T>();
    parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>)
        transformer_rows().gelu_tanh(px + b, py + b, e - b);
      else
        for (int64_t i = b; i < e; ++i) py[i] = detail::gelu_tanh_value(px[i]);
    });
  });
  return y;
}

Tensor gelu_tanh_backward(const Tensor& grad_in, const Tensor& x_in) {
  COHORT_CHECK(grad_in.sizes() == x_in.sizes(), "gelu_backward: grad {} and input {} differ",
               shape_str(grad_in.sizes()), shape_str(x_in.sizes()));
  if (Device d = op_device("gelu_backward", {&grad_in, &x_in}); !d.is_cpu())
    return gelu_tanh_backward_device(d, grad_in, x_in);
  Tensor x = x_in.contiguous(), g = grad_in.to(x.dtype()).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype());
  dispatch_floating(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    T* pd = dx.data_ptr<T>();
    parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>)
        transformer_rows().gelu_tanh_backward(pg + b, px + b, pd + b, nullptr, e - b);
      else
        for (int64_t i = b; i < e; ++i) pd[i] = pg[i] * detail::gelu_tanh_derivative(px[i]);
    });
  });
  return dx;
}

LinearGeluResult linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_linear(x, w, b);
  if (Device d = op_device("linear_gelu", {&x, &w, &b}); !d.is_cpu())
    return linear_gelu_device(d, x, w, b);
  if (x.dtype() != kFloat32) {
    LinearGeluResult r;
    r.pre = native::linear(x, w, b);
    r.out = gelu_tanh(r.pre);
    return r;
  }
  const int64_t in = w.sizes()[1], outf = w.sizes()[0];
  Tensor x2 = x.reshape({-1, in}).contiguous();
  Tensor wc = w.contiguous();
  Tensor bc = b.defined() ? b.contiguous() : Tensor();
  const int64_t rows = x2.sizes()[0];
  Shape os(x.sizes().begin(), x.sizes().end() - 1);
  os.push_back(outf);
  LinearGeluResult r{Tensor::empty(os, kFloat32), Tensor::empty(os, kFloat32)};
  const float* px = x2.data_ptr<float>();
  const float* pw = wc.data_ptr<float>();
  const float* pb = bc.defined() ? bc.data_ptr<float>() : nullptr;
  float* pre = r.pre.data_ptr<float>();
  float* out = r.out.data_ptr<float>();
  const auto& k = transformer_rows();
  const int64_t block = gelu_block_rows(in, outf);
  detail::for_row_parts(rows, detail::row_parts(rows, 16), [&](int64_t, int64_t r0, int64_t r1) {
    ThreadBudgetGuard one_thread(1);  // this part is one thread's share
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t b1 = std::min(b0 + block, r1);
      native::gemm(false, true, b1 - b0, outf, in, 1.0f, px + b0 * in, in, pw, in, 0.0f,
                   pre + b0 * outf, outf);
      for (int64_t row = b0; row < b1; ++row)
        k.bias_gelu_tanh(pre + row * outf, pb, out + row * outf, outf);
    }
  });
  return r;
}

LinearGeluGrads linear_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                                     const Tensor& pre, bool need_dx, bool need_dw, bool need_db) {
  COHORT_CHECK(grad.sizes() == pre.sizes(), "linear_gelu_backward: grad {} and output {} differ",
               shape_str(grad.sizes()), shape_str(pre.sizes()));
  if (Device d = op_device("linear_gelu_backward", {&grad, &x, &w, &pre}); !d.is_cpu())
    return linear_gelu_backward_device(d, grad, x, w, pre, need_dx, need_dw, need_db);
  const int64_t in = w.sizes()[1], outf = w.sizes()[0];
  Tensor x2 = x.reshape({-1, in});
  LinearGeluGrads out;
  Tensor dh;  // [rows, out]: d loss / d pre
  if (x.dtype() != kFloat32) {
    dh = gelu_tanh_backward(grad, pre).reshape({-1, outf});
    if (need_db) out.db = native::sum(dh, {0});
  } else {
    Tensor g2 = grad.to(kFloat32).reshape({-1, outf}).contiguous();
    Tensor p2 = pre.reshape({-1, outf}).contiguous();
    const int64_t rows = g2.sizes()[0];
    dh = Tensor::empty({rows, outf}, kFloat32);
    const float* pg = g2.data_ptr<float>();
    const float* pp = p2.data_ptr<float>();
    float* pd = dh.data_ptr<float>();
    const int64_t parts = detail::row_parts(rows, 16);
    detail::ColumnSums db(need_db ? parts : 0, outf);
    const auto& k = transformer_rows();
    detail::for_row_parts(rows, parts, [&](int64_t part, int64_t r0, int64_t r1) {
      for (int64_t b0 = r0; b0 < r1; b0 += detail::ColumnSums::kFlushRows) {
        const int64_t b1 = std::min(b0 + detail::ColumnSums::kFlushRows, r1);
        float* acc = need_db ? db.block(part) : nullptr;
        for (int64_t row = b0; row < b1; ++row)
          k.gelu_tanh_backward(pg + row * outf, pp + row * outf, pd + row * outf, acc, outf);
        if (need_db) db.flush(part);
      }
    });
    if (need_db) out.db = rows ? db.result({outf}) : Tensor::zeros({outf}, kFloat32);
  }
  if (need_dx) out.dx = native::mm(dh, w).reshape(x.sizes());
  if (need_dw) out.dw = native::mm(dh.transpose(0, 1), x2);
  return out;
}

}  // namespace cohort::kernels
