// The fused transformer ops: GELU (tanh form), linear + GELU, residual add +
// LayerNorm. Kernels in core/kernels (gelu.h, layer_norm.h).
#include <string_view>

#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/kernels/bf16_rows.h"
#include "cohort/core/kernels/gelu.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/norm.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;

namespace {

// linear_gelu under a bf16 policy: the GEMMs in bf16 with float32
// accumulation, bias + GELU in float32 (in the forward GEMM's epilogue:
// kernels::linear_gelu_tanh_bf16); backward keeps x, w and the
// pre-activation as bf16 (as autocast, whose linear output is bf16); the
// output carries its bf16 rounding for the next linear (set_bf16_twin).
Tensor linear_gelu_bf16(const Tensor& x, const Tensor& w, const Tensor& b, native::Bf16Path path) {
  Tensor x16 = native::to_bf16(x), w16 = native::to_bf16(w);
  if (!autograd::any_requires_grad({x, w, b}))
    return kernels::gelu_tanh(native::linear_bf16(x16, w16, b, path));
  kernels::GeluBf16 fwd = kernels::linear_gelu_tanh_bf16(x16, w16, b, path);
  const bool has_b = b.defined();
  Shape os(x.sizes().begin(), x.sizes().end() - 1);
  os.push_back(w16.sizes()[0]);
  Tensor out = fwd.out.reshape(os);
  native::set_bf16_twin(out, fwd.out16.reshape(os));
  return record(
      out, "linear_gelu_bf16", {x, w, b},
      [x16, w16, pre16 = fwd.pre16, has_b, path](const Tensor& g, const std::vector<bool>& needs) {
        const int64_t in = w16.sizes()[1], outf = w16.sizes()[0];
        kernels::Bf16Rows dh =
            kernels::gelu_tanh_backward_bf16(g.reshape({-1, outf}), pre16, has_b && needs[2]);
        Tensor dx, dw;
        if (needs[0]) dx = native::mm_bf16(dh.rounded, w16, path).reshape(x16.sizes());
        if (needs[1]) dw = native::mm_bf16(dh.rounded.transpose(0, 1), x16.reshape({-1, in}), path);
        return std::vector<Tensor>{dx, dw, dh.sums};
      });
}

// linear_gelu_linear under a bf16 policy: the forward of linear_gelu_bf16
// and of the linear after it, one node whose backward keeps what the two
// would (x16, w1_16, pre16, out16, w2_16) and gives the same gradients, the
// bias of the first linear summed in another order.
Tensor linear_gelu_linear_bf16(const Tensor& x, const Tensor& w1, const Tensor& b1,
                               const Tensor& w2, const Tensor& b2, native::Bf16Path path) {
  Tensor x16 = native::to_bf16(x), w1_16 = native::to_bf16(w1), w2_16 = native::to_bf16(w2);
  kernels::GeluBf16 h = kernels::linear_gelu_tanh_bf16(x16, w1_16, b1, path);
  Tensor y = native::linear_bf16(h.out16, w2_16, b2, path);
  Shape os(x.sizes().begin(), x.sizes().end() - 1);
  os.push_back(w2_16.sizes()[0]);
  y = y.reshape(os);
  if (!autograd::any_requires_grad({x, w1, b1, w2, b2})) return y;
  const bool has_b1 = b1.defined(), has_b2 = b2.defined();
  return record(y, "linear_gelu_linear_bf16", {x, w1, b1, w2, b2},
                [x16, w1_16, w2_16, pre16 = h.pre16, out16 = h.out16, has_b1, has_b2, path](
                    const Tensor& g, const std::vector<bool>& needs) {
                  const int64_t in = w1_16.sizes()[1], outf = w2_16.sizes()[0];
                  kernels::Bf16Rows g16 =
                      kernels::to_bf16_with_column_sums(g.reshape({-1, outf}), has_b2 && needs[4]);
                  Tensor dx, dw1, dw2;
                  if (needs[3]) dw2 = native::mm_bf16(g16.rounded.transpose(0, 1), out16, path);
                  kernels::Bf16Rows dh;
                  if (needs[0] || needs[1] || (has_b1 && needs[2]))
                    dh = kernels::gelu_tanh_backward_through_linear_bf16(g16.rounded, w2_16, pre16,
                                                                         has_b1 && needs[2], path);
                  if (needs[0]) dx = native::mm_bf16(dh.rounded, w1_16, path).reshape(x16.sizes());
                  if (needs[1])
                    dw1 = native::mm_bf16(dh.rounded.transpose(0, 1), x16.reshape({-1, in}), path);
                  return std::vector<Tensor>{dx, dw1, dh.sums, dw2, g16.sums};
                });
}

}  // namespace

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return gelu(x);
  COHORT_CHECK(approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"",
               approximate);
  COHORT_CHECK(is_floating(x.dtype()), "gelu: needs a floating tensor, got {}",
               dtype_name(x.dtype()));
  Tensor out = kernels::gelu_tanh(x);
  if (!autograd::any_requires_grad({x})) return out;
  Tensor xd = x.detach();
  return record(out, "gelu_tanh", {x},
                [xd](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{kernels::gelu_tanh_backward(g, xd)};
                },
                {xd});
}

Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (bf16_operands({x, w, b})) return linear_gelu_bf16(x, w, b, current_precision().bf16_path);
  kernels::LinearGeluResult r = kernels::linear_gelu(x, w, b);
  if (!autograd::any_requires_grad({x, w, b})) return r.out;
  // pre is the op's own buffer (no caller holds it), so only x and w are
  // watched for in-place changes.
  Tensor xd = x.detach(), wd = w.detach(), pre = r.pre;
  const bool has_b = b.defined();
  return record(r.out, "linear_gelu", {x, w, b},
                [xd, wd, pre, has_b](const Tensor& g, const std::vector<bool>& needs) {
                  kernels::LinearGeluGrads gr = kernels::linear_gelu_backward(
                      g, xd, wd, pre, needs[0], needs[1], has_b && needs[2]);
                  return std::vector<Tensor>{gr.dx, gr.dw, gr.db};
                },
                {xd, wd});
}

Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2) {
  if (!bf16_operands({x, w1, b1, w2, b2})) return linear(linear_gelu(x, w1, b1), w2, b2);
  COHORT_CHECK(x.dim() >= 1 && w1.dim() == 2 && w2.dim() == 2 && x.size(-1) == w1.sizes()[1] &&
                   w2.sizes()[1] == w1.sizes()[0],
               "linear_gelu_linear: input {}, w1 {} and w2 {} do not chain (want [..., in], "
               "[hidden, in] and [out, hidden])",
               shape_str(x.sizes()), shape_str(w1.sizes()), shape_str(w2.sizes()));
  return linear_gelu_linear_bf16(x, w1, b1, w2, b2, current_precision().bf16_path);
}

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& delta, const Tensor& weight,
                                         const Tensor& bias, double eps) {
  native::AddLayerNormResult r =
      native::add_layer_norm(x, delta, weight, bias, eps, current_precision().is_bf16());
  Tensor s = r.sum, y = r.norm.out;
  if (!autograd::any_requires_grad({x, delta, weight, bias})) return {s, y};
  // Two nodes: s = x + delta (its gradient, the sum of what reaches s from
  // its users and from y, goes to both), and y = layer_norm(s).
  record(s, "add", {x, delta}, [](const Tensor& g, const std::vector<bool>& needs) {
    return std::vector<Tensor>{needs[0] ? g : Tensor(), needs[1] ? g : Tensor()};
  });
  Tensor sd = s.detach(), wd = weight.defined() ? weight.detach() : Tensor();
  Tensor mean = r.norm.mean, rstd = r.norm.rstd;
  Shape ns{x.size(-1)};
  record(y, "add_layer_norm", {s, weight, bias},
         [=](const Tensor& g, const std::vector<bool>& needs) {
           native::LayerNormGrads gr =
               native::layer_norm_backward(g, sd, ns, mean, rstd, wd, needs[0], needs[1], needs[2]);
           return std::vector<Tensor>{gr.dx, gr.dweight, gr.dbias};
         },
         {sd, wd});
  return {s, y};
}

}  // namespace cohort
