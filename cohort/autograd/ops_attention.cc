// scaled_dot_product_attention over the blocked kernels in
// cohort/core/kernels/attention.h: the forward pass keeps the output and each
// row's log-sum-exp, the backward pass recomputes the scores from them.
// Tensors on a device run the device kernels of kernels/attention_device.h
// on the operands' own dtype (float32, or bfloat16 there); a bf16 precision
// policy does not round there yet.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/kernels/attention.h"
#include "cohort/core/kernels/attention_device.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort {

using autograd::record;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The rows of t [..., T, D] as the kernel reads them: in place when each row
// is contiguous and there are at most two leading dims (as [B, H]), else from
// a contiguous copy left in `hold`.
template <class T>
kernels::HeadRows<T> head_rows(const Tensor& t, Tensor& hold) {
  const int64_t r = t.dim();
  Tensor src = t;
  if ((t.size(-1) != 1 && t.stride(-1) != 1) || (r > 4 && !t.is_contiguous())) {
    // Outputs are allocated contiguous by the op: only inputs get here.
    COHORT_ASSERT(std::is_const_v<T>, "{}: an output needs a copy", kOp);
    hold = t.detach().contiguous();
    src = hold;
  }
  kernels::HeadRows<T> h;
  h.data = src.data_ptr<std::remove_const_t<T>>();
  h.row_stride = src.stride(-2);
  if (r == 3) h.batch_stride = src.stride(0);
  if (r == 4) {
    h.heads = src.size(1);
    h.batch_stride = src.stride(0);
    h.head_stride = src.stride(1);
  }
  if (r > 4) h.batch_stride = src.size(-2) * src.size(-1);
  return h;
}

kernels::AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v,
                                        bool is_causal, std::optional<double> scale) {
  COHORT_CHECK(q.defined() && k.defined() && v.defined(), "{}: q, k and v must all be defined",
               kOp);
  const bool device_bf16 = !q.is_cpu() && q.dtype() == DType::kBFloat16 && k.dtype() == q.dtype() &&
                           v.dtype() == q.dtype();
  COHORT_CHECK((q.dtype() == DType::kFloat32 && k.dtype() == DType::kFloat32 &&
                v.dtype() == DType::kFloat32) ||
                   device_bf16,
               "{}: only float32 is supported, got q {}, k {}, v {} (bfloat16 too on a device)",
               kOp, dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  COHORT_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim(),
               "{}: q, k and v must have the same rank >= 2 ([..., T, D]), got q {}, k {}, v {}",
               kOp, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  const int64_t r = q.dim();
  for (int64_t i = 0; i < r - 2; ++i)
    COHORT_CHECK(q.size(i) == k.size(i) && q.size(i) == v.size(i),
                 "{}: q, k and v must have the same leading dims (no broadcasting), got q {}, k "
                 "{}, v {}",
                 kOp, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  COHORT_CHECK(q.size(-1) == k.size(-1),
               "{}: q [..., Tq, D] and k [..., Tk, D] must have the same D, got q {} and k {}", kOp,
               shape_str(q.sizes()), shape_str(k.sizes()));
  COHORT_CHECK(k.size(-2) == v.size(-2),
               "{}: k [..., Tk, D] and v [..., Tk, Dv] must have the same Tk, got k {} and v {}",
               kOp, shape_str(k.sizes()), shape_str(v.sizes()));
  COHORT_CHECK(v.size(-1) == q.size(-1),
               "{}: v's last dim (Dv) must equal q's and k's (D) (Dv != D is not supported), got "
               "q {}, k {}, v {}",
               kOp, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  kernels::AttentionShape s;
  s.batch_heads = 1;
  for (int64_t i = 0; i < r - 2; ++i) s.batch_heads *= q.size(i);
  s.q_len = q.size(-2);
  s.kv_len = k.size(-2);
  s.head_dim = q.size(-1);
  s.causal = is_causal;
  s.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(s.head_dim, 1)));
  kernels::check_attention_shape(s, kOp);
  return s;
}

// Whether the policy's bf16 path runs attention's products in bf16 too
// (kernels/attention.h: on vdpbf16ps, P and dS rounded); the other paths
// widen the operands tile by tile.
bool bf16_products() { return current_precision().bf16_path == native::Bf16Path::kAvx512Bf16; }

// Under a bf16 PrecisionPolicy (precision.h): q, k, v and the incoming
// gradient rounded to bf16, the block kernels run on them (scores, softmax
// statistics (log-sum-exp) and accumulation in float32; the products in
// bf16 on the kAvx512Bf16 path, else exact on the widened operands: the
// emulated bf16 path); backward keeps the bf16 q, k, v and output, the
// float32 lse.
Tensor attention_bf16(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                      const kernels::AttentionShape& s) {
  Tensor q16 = native::to_bf16(q_in), k16 = native::to_bf16(k_in), v16 = native::to_bf16(v_in);
  Tensor y = Tensor::empty(q_in.sizes());
  Tensor hold, yh;
  Tensor lse = Tensor::empty({s.batch_heads * s.q_len});
  const bool products = bf16_products();
  kernels::attention_forward(s, head_rows<const BFloat16>(q16, hold),
                             head_rows<const BFloat16>(k16, hold),
                             head_rows<const BFloat16>(v16, hold), head_rows<float>(y, yh),
                             lse.data_ptr<float>(), products);
  if (!autograd::any_requires_grad({q_in, k_in, v_in})) return y;
  Tensor y16 = native::to_bf16(y);
  return record(y, "scaled_dot_product_attention_bf16", {q_in, k_in, v_in},
                [=](const Tensor& g_in, const std::vector<bool>&) {
                  Tensor g16 = native::to_bf16(g_in);
                  Tensor gq = Tensor::empty(q16.sizes()), gk = Tensor::empty(k16.sizes());
                  Tensor gv = Tensor::empty(v16.sizes());
                  Tensor hold[2];  // to_bf16's results are contiguous: no copies
                  kernels::attention_backward(
                      s, head_rows<const BFloat16>(q16, hold[0]),
                      head_rows<const BFloat16>(k16, hold[0]),
                      head_rows<const BFloat16>(v16, hold[0]),
                      head_rows<const BFloat16>(y16, hold[0]), lse.data_ptr<float>(),
                      head_rows<const BFloat16>(g16, hold[0]), head_rows<float>(gq, hold[1]),
                      head_rows<float>(gk, hold[1]), head_rows<float>(gv, hold[1]), products);
                  return std::vector<Tensor>{gq, gk, gv};
                });
}

// Heads inside GPT's packed layouts: q, k or v (part 0, 1, 2) of a
// [B, T, 3C] buffer, or the merged heads of a [B, T, C] one. Head h of batch
// b starts at b * T * width + part * C + h * D, its rows width apart.
struct PackedLayout {
  int64_t b, t, c, nh;
  template <class T>
  kernels::HeadRows<T> heads(T* data, int64_t parts, int64_t part) const {
    return kernels::HeadRows<T>{data + part * c, nh, t * parts * c, c / nh, parts * c};
  }
  template <class T>
  kernels::HeadRows<T> qkv(T* data, int64_t part) const {
    return heads(data, 3, part);
  }
  template <class T>
  kernels::HeadRows<T> merged(T* data) const {
    return heads(data, 1, 0);
  }
};

// qkv float32 or bf16, contiguous; y [B, T, C] and lse written. products:
// bf16 products (T = BFloat16 only).
template <class T>
void packed_forward(const kernels::AttentionShape& s, const PackedLayout& l, const T* qkv, float* y,
                    float* lse, bool products = false) {
  if constexpr (std::is_same_v<T, BFloat16>)
    kernels::attention_forward(s, l.qkv(qkv, 0), l.qkv(qkv, 1), l.qkv(qkv, 2), l.merged(y), lse,
                               products);
  else
    kernels::attention_forward(s, l.qkv(qkv, 0), l.qkv(qkv, 1), l.qkv(qkv, 2), l.merged(y), lse);
}

// qkv's gradient from the saved qkv, y and lse and y's gradient g.
template <class T>
Tensor packed_backward(const kernels::AttentionShape& s, const PackedLayout& l, const T* qkv,
                       const T* y, const float* lse, const T* g, bool products = false) {
  Tensor gqkv = Tensor::empty({l.b, l.t, 3 * l.c});
  float* pg = gqkv.data_ptr<float>();
  if constexpr (std::is_same_v<T, BFloat16>)
    kernels::attention_backward(s, l.qkv(qkv, 0), l.qkv(qkv, 1), l.qkv(qkv, 2), l.merged(y), lse,
                                l.merged(g), l.qkv(pg, 0), l.qkv(pg, 1), l.qkv(pg, 2), products);
  else
    kernels::attention_backward(s, l.qkv(qkv, 0), l.qkv(qkv, 1), l.qkv(qkv, 2), l.merged(y), lse,
                                l.merged(g), l.qkv(pg, 0), l.qkv(pg, 1), l.qkv(pg, 2));
  return gqkv;
}

// The rows of t [..., T, D] on a device, as head_rows above (a contiguous
// copy where the layout needs one).
kernels::DeviceHeadRows device_heads(const Tensor& t_in) {
  Tensor t = t_in.detach();
  const int64_t r = t.dim();
  if ((t.size(-1) != 1 && t.stride(-1) != 1) || (r > 4 && !t.is_contiguous())) t = t.contiguous();
  kernels::DeviceHeadRows h;
  h.base = t;
  h.row_stride = t.stride(-2);
  if (r == 3) h.batch_stride = t.stride(0);
  if (r == 4) {
    h.heads = t.size(1);
    h.batch_stride = t.stride(0);
    h.head_stride = t.stride(1);
  }
  if (r > 4) h.batch_stride = t.size(-2) * t.size(-1);
  return h;
}

Tensor attention_on_device(Device d, const kernels::AttentionShape& s, const Tensor& q_in,
                           const Tensor& k_in, const Tensor& v_in) {
  const kernels::DeviceHeadRows q = device_heads(q_in), k = device_heads(k_in),
                                v = device_heads(v_in);
  const DType dt = q_in.dtype();
  Tensor y = Tensor::empty(q_in.sizes(), dt, d);
  Tensor lse = Tensor::empty({s.batch_heads * s.q_len}, DType::kFloat32, d);
  kernels::attention_forward_device(d, s, q, k, v, device_heads(y), lse);
  if (!autograd::any_requires_grad({q_in, k_in, v_in})) return y;
  Tensor yd = y.detach();
  const Shape qs = q_in.sizes(), ks = k_in.sizes(), vs = v_in.sizes();
  return record(y, kOp, {q_in, k_in, v_in},
                [=](const Tensor& g, const std::vector<bool>&) {
                  Tensor gq = Tensor::empty(qs, dt, d), gk = Tensor::empty(ks, dt, d);
                  Tensor gv = Tensor::empty(vs, dt, d);
                  kernels::attention_backward_device(d, s, q, k, v, device_heads(yd), lse,
                                                     device_heads(g.to(dt)), device_heads(gq),
                                                     device_heads(gk), device_heads(gv));
                  return std::vector<Tensor>{gq, gk, gv};
                },
                {q_in, k_in, v_in, y});
}

// Part `part` of `parts` of a packed [B, T, parts * C] buffer on a device.
kernels::DeviceHeadRows packed_heads(const Tensor& buf, const PackedLayout& l, int64_t parts,
                                     int64_t part) {
  kernels::DeviceHeadRows h;
  h.base = buf.detach().narrow(2, part * l.c, l.c);
  h.heads = l.nh;
  h.batch_stride = l.t * parts * l.c;
  h.head_stride = l.c / l.nh;
  h.row_stride = parts * l.c;
  return h;
}

Tensor attention_packed_on_device(Device d, const Tensor& qkv_in, const PackedLayout& l,
                                  const kernels::AttentionShape& s) {
  constexpr const char* op = "scaled_dot_product_attention_packed";
  Tensor qkv = qkv_in.detach().contiguous();
  const DType dt = qkv.dtype();
  Tensor y = Tensor::empty({l.b, l.t, l.c}, dt, d);
  Tensor lse = Tensor::empty({s.batch_heads * s.q_len}, DType::kFloat32, d);
  kernels::attention_forward_device(d, s, packed_heads(qkv, l, 3, 0), packed_heads(qkv, l, 3, 1),
                                    packed_heads(qkv, l, 3, 2), packed_heads(y, l, 1, 0), lse);
  if (!autograd::any_requires_grad({qkv_in})) return y;
  Tensor yd = y.detach();
  return record(y, op, {qkv_in},
                [=](const Tensor& g_in, const std::vector<bool>&) {
                  Tensor g = g_in.to(dt).contiguous();
                  Tensor gqkv = Tensor::empty({l.b, l.t, 3 * l.c}, dt, d);
                  kernels::attention_backward_device(
                      d, s, packed_heads(qkv, l, 3, 0), packed_heads(qkv, l, 3, 1),
                      packed_heads(qkv, l, 3, 2), packed_heads(yd, l, 1, 0), lse,
                      packed_heads(g, l, 1, 0), packed_heads(gqkv, l, 3, 0),
                      packed_heads(gqkv, l, 3, 1), packed_heads(gqkv, l, 3, 2));
                  return std::vector<Tensor>{gqkv};
                },
                {qkv_in, y});
}

Tensor attention_packed_bf16(const Tensor& qkv, const PackedLayout& l,
                             const kernels::AttentionShape& s) {
  Tensor qkv16 = native::to_bf16(qkv);
  Tensor y = Tensor::empty({l.b, l.t, l.c});
  Tensor lse = Tensor::empty({s.batch_heads * s.q_len});
  const bool products = bf16_products();
  packed_forward<BFloat16>(s, l, qkv16.data_ptr<BFloat16>(), y.data_ptr<float>(),
                           lse.data_ptr<float>(), products);
  if (!autograd::any_requires_grad({qkv})) return y;
  // y's rounding is both what backward keeps and c_proj's operand.
  Tensor y16 = native::to_bf16(y);
  native::set_bf16_twin(y, y16);
  return record(y, "scaled_dot_product_attention_packed_bf16", {qkv},
                [=](const Tensor& g, const std::vector<bool>&) {
                  Tensor g16 = native::to_bf16(g);
                  return std::vector<Tensor>{packed_backward<BFloat16>(
                      s, l, qkv16.data_ptr<BFloat16>(), y16.data_ptr<BFloat16>(),
                      lse.data_ptr<float>(), g16.data_ptr<BFloat16>(), products)};
                });
}

}  // namespace

Tensor scaled_dot_product_attention_packed(const Tensor& qkv_in, int64_t n_head, bool is_causal,
                                           std::optional<double> scale) {
  constexpr const char* op = "scaled_dot_product_attention_packed";
  COHORT_CHECK(qkv_in.defined(), "{}: qkv is undefined", op);
  COHORT_CHECK(qkv_in.dim() == 3 && (qkv_in.dtype() == kFloat32 ||
                                     (!qkv_in.is_cpu() && qkv_in.dtype() == kBFloat16)),
               "{}: qkv must be a float32 [B, T, 3C] tensor (or bfloat16 on a device), got {} {}",
               op, dtype_name(qkv_in.dtype()), shape_str(qkv_in.sizes()));
  COHORT_CHECK(n_head >= 1 && qkv_in.size(2) % (3 * n_head) == 0,
               "{}: qkv's last dim ({}) must be 3 x n_head x head_dim with n_head {} >= 1", op,
               qkv_in.size(2), n_head);
  const PackedLayout l{qkv_in.size(0), qkv_in.size(1), qkv_in.size(2) / 3, n_head};
  kernels::AttentionShape s;
  s.batch_heads = l.b * n_head;
  s.q_len = s.kv_len = l.t;
  s.head_dim = l.c / n_head;
  s.causal = is_causal;
  s.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  kernels::check_attention_shape(s, op);
  if (Device d = qkv_in.device(); !d.is_cpu()) return attention_packed_on_device(d, qkv_in, l, s);
  if (current_precision().is_bf16()) return attention_packed_bf16(qkv_in, l, s);
  Tensor qkv = qkv_in.contiguous();
  Tensor y = Tensor::empty({l.b, l.t, l.c});
  Tensor lse = Tensor::empty({s.batch_heads * s.q_len});
  packed_forward<float>(s, l, qkv.data_ptr<float>(), y.data_ptr<float>(), lse.data_ptr<float>());
  if (!autograd::any_requires_grad({qkv_in})) return y;
  Tensor qd = qkv.detach(), yd = y.detach();
  return record(y, op, {qkv_in},
                [=](const Tensor& g_in, const std::vector<bool>&) {
                  Tensor g = g_in.contiguous();
                  return std::vector<Tensor>{
                      packed_backward<float>(s, l, qd.data_ptr<float>(), yd.data_ptr<float>(),
                                             lse.data_ptr<float>(), g.data_ptr<float>())};
                },
                {qkv_in, y});
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    bool is_causal, std::optional<double> scale) {
  const kernels::AttentionShape s = attention_shape(q_in, k_in, v_in, is_causal, scale);
  if (Device d = op_device(kOp, {&q_in, &k_in, &v_in}); !d.is_cpu())
    return attention_on_device(d, s, q_in, k_in, v_in);
  if (current_precision().is_bf16()) return attention_bf16(q_in, k_in, v_in, s);
  Tensor y = Tensor::empty(q_in.sizes());
  Tensor hq, hk, hv;
  const auto q = head_rows<const float>(q_in, hq);
  const auto k = head_rows<const float>(k_in, hk);
  const auto v = head_rows<const float>(v_in, hv);
  Tensor lse = Tensor::empty({s.batch_heads * s.q_len});
  Tensor yh;
  kernels::attention_forward(s, q, k, v, head_rows<float>(y, yh), lse.data_ptr<float>());
  if (!autograd::any_requires_grad({q_in, k_in, v_in})) return y;
  // The closure keeps the inputs as given (views included: no copies) and
  // their contiguous copies when the kernel needed them.
  Tensor qd = hq.defined() ? hq : q_in.detach(), kd = hk.defined() ? hk : k_in.detach();
  Tensor vd = hv.defined() ? hv : v_in.detach(), yd = y.detach();
  return record(y, kOp, {q_in, k_in, v_in},
                [=](const Tensor& g_in, const std::vector<bool>&) {
                  Tensor gq = Tensor::empty(qd.sizes()), gk = Tensor::empty(kd.sizes());
                  Tensor gv = Tensor::empty(vd.sizes());
                  Tensor hold[6];  // contiguous copies of inputs whose layout needs one
                  kernels::attention_backward(
                      s, head_rows<const float>(qd, hold[0]), head_rows<const float>(kd, hold[1]),
                      head_rows<const float>(vd, hold[2]), head_rows<const float>(yd, hold[3]),
                      lse.data_ptr<float>(), head_rows<const float>(g_in, hold[4]),
                      head_rows<float>(gq, hold[5]), head_rows<float>(gk, hold[5]),
                      head_rows<float>(gv, hold[5]));
                  return std::vector<Tensor>{gq, gk, gv};
                },
                {q_in, k_in, v_in, y});
}

}  // namespace cohort
