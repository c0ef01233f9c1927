// matmul and linear, in float32 or (under a bf16 PrecisionPolicy,
// autograd/precision.h) in bf16 with float32 accumulation.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/kernels/bf16_rows.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;

namespace {

// The bf16 forms: operands rounded once, the bf16 copies are what backward
// keeps (x's float32 storage is not held by the graph); the incoming gradient
// is rounded too, every product accumulates in float32, gradients are float32.
Tensor recorded_matmul_bf16(const Tensor& a, const Tensor& b, native::Bf16Path path) {
  Tensor a16 = native::to_bf16(a), b16 = native::to_bf16(b);
  Tensor out = native::matmul_bf16(a16, b16, path);
  if (!autograd::any_requires_grad({a, b})) return out;
  return record(out, "matmul_bf16", {a, b},
                [a16, b16, path](const Tensor& g, const std::vector<bool>& needs) {
                  Tensor ga, gb;
                  Tensor a2 = a16.dim() == 1 ? a16.unsqueeze(0) : a16;
                  Tensor b2 = b16.dim() == 1 ? b16.unsqueeze(1) : b16;
                  Tensor g2 = g;
                  if (a16.dim() == 1 && b16.dim() == 1)
                    g2 = g2.reshape({1, 1});
                  else if (a16.dim() == 1)
                    g2 = g2.unsqueeze(-2);
                  else if (b16.dim() == 1)
                    g2 = g2.unsqueeze(-1);
                  Tensor g16 = native::to_bf16(g2);
                  if (needs[0]) {
                    Tensor t = native::matmul_bf16(g16, b2.transpose(-1, -2), path);
                    ga = native::sum_to(t, a2.sizes()).reshape(a16.sizes());
                  }
                  if (needs[1]) {
                    Tensor t = native::matmul_bf16(a2.transpose(-1, -2), g16, path);
                    gb = native::sum_to(t, b2.sizes()).reshape(b16.sizes());
                  }
                  return std::vector<Tensor>{ga, gb};
                });
}

Tensor recorded_linear_bf16(const Tensor& x, const Tensor& w, const Tensor& b,
                            native::Bf16Path path) {
  Tensor x16 = native::to_bf16(x), w16 = native::to_bf16(w);
  Tensor out = native::linear_bf16(x16, w16, b, path);
  if (!autograd::any_requires_grad({x, w, b})) return out;
  const bool has_b = b.defined();
  return record(out, "linear_bf16", {x, w, b},
                [x16, w16, has_b, path](const Tensor& g, const std::vector<bool>& needs) {
                  const int64_t in = w16.sizes()[1], outf = w16.sizes()[0];
                  // The rounded gradient and the bias gradient in one pass.
                  kernels::Bf16Rows g16 =
                      kernels::to_bf16_with_column_sums(g.reshape({-1, outf}), has_b && needs[2]);
                  Tensor gx, gw;
                  if (needs[0]) gx = native::mm_bf16(g16.rounded, w16, path).reshape(x16.sizes());
                  if (needs[1])
                    gw = native::mm_bf16(g16.rounded.transpose(0, 1), x16.reshape({-1, in}), path);
                  return std::vector<Tensor>{gx, gw, g16.sums};
                });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (bf16_operands({a, b})) return recorded_matmul_bf16(a, b, current_precision().bf16_path);
  Tensor out = native::matmul(a, b);
  if (!autograd::any_requires_grad({a, b})) return out;
  Tensor ad = a.detach(), bd = b.detach();
  return record(out, "matmul", {a, b},
                [ad, bd](const Tensor& g, const std::vector<bool>& needs) {
                  Tensor ga, gb;
                  // Promote 1-D operands to matrices so one rule covers every case.
                  Tensor a2 = ad.dim() == 1 ? ad.unsqueeze(0) : ad;
                  Tensor b2 = bd.dim() == 1 ? bd.unsqueeze(1) : bd;
                  Tensor g2 = g;
                  if (ad.dim() == 1 && bd.dim() == 1)
                    g2 = g2.reshape({1, 1});
                  else if (ad.dim() == 1)
                    g2 = g2.unsqueeze(-2);
                  else if (bd.dim() == 1)
                    g2 = g2.unsqueeze(-1);
                  if (needs[0]) {
                    Tensor t = native::matmul(g2, b2.transpose(-1, -2));
                    ga = native::sum_to(t, a2.sizes()).reshape(ad.sizes());
                  }
                  if (needs[1]) {
                    Tensor t = native::matmul(a2.transpose(-1, -2), g2);
                    gb = native::sum_to(t, b2.sizes()).reshape(bd.sizes());
                  }
                  return std::vector<Tensor>{ga, gb};
                },
                {ad, bd});
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (bf16_operands({x, w, b})) return recorded_linear_bf16(x, w, b, current_precision().bf16_path);
  Tensor out = native::linear(x, w, b);
  if (!autograd::any_requires_grad({x, w, b})) return out;
  Tensor xd = x.detach(), wd = w.detach();
  bool has_b = b.defined();
  return record(out, "linear", {x, w, b},
                [xd, wd, has_b](const Tensor& g, const std::vector<bool>& needs) {
                  const int64_t in = wd.sizes()[1], outf = wd.sizes()[0];
                  Tensor g2 = g.reshape({-1, outf});
                  Tensor gx, gw, gb;
                  if (needs[0]) gx = native::mm(g2, wd).reshape(xd.sizes());  // [R,out][out,in]
                  if (needs[1]) gw = native::mm(g2.transpose(0, 1), xd.reshape({-1, in}));
                  if (has_b && needs[2]) gb = native::sum(g2, {0});
                  return std::vector<Tensor>{gx, gw, gb};
                },
                {xd, wd});
}

}  // namespace cohort
