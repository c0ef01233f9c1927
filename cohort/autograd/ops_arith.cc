// Arithmetic and pointwise activations.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;
using native::BinaryOp;

namespace {

// Backward of broadcasting: sum to the input's shape and give its dtype.
Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dt) {
  return native::sum_to(g, shape).to(dt);
}

Tensor binary_op(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = native::binary(op, a, b);
  if (!autograd::any_requires_grad({a, b})) return out;
  Shape sa = a.sizes(), sb = b.sizes();
  DType da = a.dtype(), db = b.dtype();
  // Save only what the gradient reads: nothing for add/sub, the other
  // operand for mul, the divisor and the result for div.
  Tensor ad, bd, od;
  if (op == BinaryOp::kMul) ad = a.detach();
  if (op == BinaryOp::kMul || op == BinaryOp::kDiv) bd = b.detach();
  if (op == BinaryOp::kDiv) od = out.detach();
  return record(out, name, {a, b},
                [=](const Tensor& g, const std::vector<bool>& needs) -> std::vector<Tensor> {
                  Tensor ga, gb;
                  switch (op) {
                    case BinaryOp::kAdd:
                      if (needs[0]) ga = reduce_grad(g, sa, da);
                      if (needs[1]) gb = reduce_grad(g, sb, db);
                      break;
                    case BinaryOp::kSub:
                      if (needs[0]) ga = reduce_grad(g, sa, da);
                      if (needs[1])
                        gb = reduce_grad(native::unary(native::UnaryOp::kNeg, g), sb, db);
                      break;
                    case BinaryOp::kMul:
                      if (needs[0]) ga = reduce_grad(native::binary(BinaryOp::kMul, g, bd), sa, da);
                      if (needs[1]) gb = reduce_grad(native::binary(BinaryOp::kMul, g, ad), sb, db);
                      break;
                    case BinaryOp::kDiv:
                      if (needs[0]) ga = reduce_grad(native::binary(BinaryOp::kDiv, g, bd), sa, da);
                      if (needs[1]) {
                        Tensor t = native::binary(BinaryOp::kMul, g, od);
                        t = native::binary(BinaryOp::kDiv, t, bd);
                        gb = reduce_grad(native::unary(native::UnaryOp::kNeg, t), sb, db);
                      }
                      break;
                    default:
                      throw Error("binary_op: no backward");
                  }
                  return {ga, gb};
                },
                {ad, bd, od});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kAdd, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kSub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kMul, "mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::kDiv, "div", a, b); }

Tensor add(const Tensor& a, double s) {
  Tensor out = native::binary_scalar(BinaryOp::kAdd, a, s);
  DType da = a.dtype();
  return record(out, "add", {a}, [=](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.to(da)};
  });
}

Tensor sub(const Tensor& a, double s) { return add(a, -s); }

Tensor rsub(const Tensor& a, double s) {
  Tensor out = native::rbinary_scalar(BinaryOp::kSub, s, a);
  DType da = a.dtype();
  return record(out, "rsub", {a}, [=](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{native::unary(native::UnaryOp::kNeg, g).to(da)};
  });
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = native::binary_scalar(BinaryOp::kMul, a, s);
  DType da = a.dtype();
  return record(out, "mul", {a}, [=](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{native::binary_scalar(BinaryOp::kMul, g, s).to(da)};
  });
}

Tensor div(const Tensor& a, double s) { return mul(a, 1.0 / s); }

Tensor rdiv(const Tensor& a, double s) {
  Tensor out = native::rbinary_scalar(BinaryOp::kDiv, s, a);
  DType da = a.dtype();
  Tensor ad = a.detach(), od = out.detach();
  return record(out, "rdiv", {a},
                [=](const Tensor& g, const std::vector<bool>&) {
                  // d(s/a)/da = -s/a^2 = -out/a
                  Tensor t = native::binary(BinaryOp::kMul, g, od);
                  t = native::binary(BinaryOp::kDiv, t, ad);
                  return std::vector<Tensor>{native::unary(native::UnaryOp::kNeg, t).to(da)};
                },
                {ad, od});
}

Tensor neg(const Tensor& a) {
  Tensor out = native::unary(native::UnaryOp::kNeg, a);
  return record(out, "neg", {a}, [](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{native::unary(native::UnaryOp::kNeg, g)};
  });
}

Tensor relu(const Tensor& x) {
  Tensor out = native::unary(native::UnaryOp::kRelu, x);
  if (!autograd::any_requires_grad({x})) return out;
  Tensor od = out.detach();
  return record(out, "relu", {x},
                [od](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{native::relu_backward(g, od)};
                },
                {od});
}

}  // namespace cohort
