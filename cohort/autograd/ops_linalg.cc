// matmul and linear.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;

Tensor matmul(const Tensor& a, const Tensor& b) {
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
