// Pointwise math, activations, where and comparisons.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/index.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;
using native::BinaryOp;
using native::CompareOp;
using native::UnaryOp;

namespace {

Tensor mul_t(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::kMul, a, b); }
Tensor div_t(const Tensor& a, const Tensor& b) { return native::binary(BinaryOp::kDiv, a, b); }

void check_floating(const Tensor& x, const char* op) {
  COHORT_CHECK(is_floating(x.dtype()), "{}: needs a floating tensor, got {}", op,
               dtype_name(x.dtype()));
}

// Which of input and output a unary op's gradient reads.
enum class Saves { kInput, kOutput };

// Records a unary op whose gradient is fn(g, x_detached, out_detached); only
// the tensor named by `saves` is kept (the other is passed undefined).
template <typename F>
Tensor unary_record(Tensor out, const Tensor& x, const char* name, Saves saves, F fn) {
  if (!autograd::any_requires_grad({x})) return out;
  Tensor xd = saves == Saves::kInput ? x.detach() : Tensor();
  Tensor od = saves == Saves::kOutput ? out.detach() : Tensor();
  return record(out, name, {x},
                [xd, od, fn](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{fn(g, xd, od)};
                },
                {xd, od});
}

}  // namespace

Tensor exp(const Tensor& x) {
  return unary_record(native::unary(UnaryOp::kExp, x), x, "exp", Saves::kOutput,
                      [](const Tensor& g, const Tensor&, const Tensor& o) { return mul_t(g, o); });
}

Tensor log(const Tensor& x) {
  return unary_record(
      native::unary(UnaryOp::kLog, x), x, "log", Saves::kInput,
      [](const Tensor& g, const Tensor& xd, const Tensor&) { return div_t(g, xd); });
}

Tensor sqrt(const Tensor& x) {
  return unary_record(native::unary(UnaryOp::kSqrt, x), x, "sqrt", Saves::kOutput,
                      [](const Tensor& g, const Tensor&, const Tensor& o) {
                        return native::binary_scalar(BinaryOp::kMul, div_t(g, o), 0.5);
                      });
}

Tensor abs(const Tensor& x) {
  return unary_record(native::unary(UnaryOp::kAbs, x), x, "abs", Saves::kInput,
                      [](const Tensor& g, const Tensor& xd, const Tensor&) {
                        return mul_t(g, native::unary(UnaryOp::kSign, xd));
                      });
}

Tensor pow(const Tensor& x, double e) {
  check_floating(x, "pow");
  return unary_record(native::binary_scalar(BinaryOp::kPow, x, e), x, "pow", Saves::kInput,
                      [e](const Tensor& g, const Tensor& xd, const Tensor&) {
                        if (e == 0.0) return Tensor::zeros(xd.sizes(), xd.dtype(), xd.device());
                        Tensor d = native::binary_scalar(BinaryOp::kPow, xd, e - 1.0);
                        return mul_t(g, native::binary_scalar(BinaryOp::kMul, d, e));
                      });
}

Tensor pow(const Tensor& x, const Tensor& e) {
  check_floating(x, "pow");
  Tensor out = native::binary(BinaryOp::kPow, x, e);
  if (!autograd::any_requires_grad({x, e})) return out;
  Tensor xd = x.detach(), ed = e.detach(), od = out.detach();
  return record(out, "pow", {x, e},
                [xd, ed, od](const Tensor& g, const std::vector<bool>& needs) {
                  Tensor gx, ge;
                  if (needs[0]) {
                    // e * x^(e-1)
                    Tensor d = native::binary(BinaryOp::kPow, xd,
                                              native::binary_scalar(BinaryOp::kSub, ed, 1));
                    gx = native::sum_to(mul_t(g, mul_t(d, ed)), xd.sizes()).to(xd.dtype());
                  }
                  if (needs[1]) {
                    // x^e * log(x)
                    Tensor d = mul_t(od, native::unary(UnaryOp::kLog, xd));
                    ge = native::sum_to(mul_t(g, d), ed.sizes()).to(ed.dtype());
                  }
                  return std::vector<Tensor>{gx, ge};
                },
                {xd, ed, od});
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  COHORT_CHECK(lo <= hi, "clamp: min {} is greater than max {}", lo, hi);
  return unary_record(native::clamp(x, lo, hi), x, "clamp", Saves::kInput,
                      [lo, hi](const Tensor& g, const Tensor& xd, const Tensor&) {
                        return native::clamp_backward(g, xd, lo, hi);
                      });
}

namespace {

Tensor extremum(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor out = native::binary(is_max ? BinaryOp::kMaximum : BinaryOp::kMinimum, a, b);
  if (!autograd::any_requires_grad({a, b})) return out;
  Tensor ad = a.detach(), bd = b.detach();
  return record(out, is_max ? "maximum" : "minimum", {a, b},
                [ad, bd, is_max](const Tensor& g, const std::vector<bool>& needs) {
                  Tensor pick_a = native::compare(is_max ? CompareOp::kGe : CompareOp::kLe, ad, bd);
                  Tensor zero = Tensor::full({}, 0.0, g.dtype(), g.device());
                  Tensor ga, gb;
                  if (needs[0])
                    ga = native::sum_to(native::where(pick_a, g, zero), ad.sizes()).to(ad.dtype());
                  if (needs[1])
                    gb = native::sum_to(native::where(pick_a, zero, g), bd.sizes()).to(bd.dtype());
                  return std::vector<Tensor>{ga, gb};
                },
                {ad, bd});
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(a, b, false); }

Tensor gelu(const Tensor& x) {
  return unary_record(native::unary(UnaryOp::kGelu, x), x, "gelu", Saves::kInput,
                      [](const Tensor& g, const Tensor& xd, const Tensor&) {
                        return native::gelu_backward(g, xd);
                      });
}

Tensor tanh(const Tensor& x) {
  return unary_record(
      native::unary(UnaryOp::kTanh, x), x, "tanh", Saves::kOutput,
      [](const Tensor& g, const Tensor&, const Tensor& o) { return native::tanh_backward(g, o); });
}

Tensor sigmoid(const Tensor& x) {
  return unary_record(native::unary(UnaryOp::kSigmoid, x), x, "sigmoid", Saves::kOutput,
                      [](const Tensor& g, const Tensor&, const Tensor& o) {
                        return native::sigmoid_backward(g, o);
                      });
}

Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b) {
  Tensor out = native::where(mask, a, b);
  if (!autograd::any_requires_grad({a, b})) return out;
  Tensor md = mask.detach();
  Shape sa = a.sizes(), sb = b.sizes();
  DType da = a.dtype(), db = b.dtype();
  return record(out, "where", {a, b},
                [=](const Tensor& g, const std::vector<bool>& needs) {
                  Tensor zero = Tensor::full({}, 0.0, g.dtype(), g.device());
                  Tensor ga, gb;
                  if (needs[0]) ga = native::sum_to(native::where(md, g, zero), sa).to(da);
                  if (needs[1]) gb = native::sum_to(native::where(md, zero, g), sb).to(db);
                  return std::vector<Tensor>{ga, gb};
                },
                {md});
}

namespace {

// where() with one side a plain number: the tensor side keeps its dtype
// (floating) or becomes float32 (integer, as a Python float promotes it).
Tensor where_scalar(const Tensor& mask, const Tensor& t, double s, bool tensor_first) {
  const DType dt = is_floating(t.dtype()) ? t.dtype() : kFloat32;
  Tensor st = Tensor::full({}, s, dt, t.device());
  Tensor out = tensor_first ? native::where(mask, t, st) : native::where(mask, st, t);
  if (!autograd::any_requires_grad({t})) return out;
  Tensor md = mask.detach();
  Shape shape = t.sizes();
  DType tdt = t.dtype();
  return record(out, "where", {t},
                [=](const Tensor& g, const std::vector<bool>&) {
                  Tensor zero = Tensor::full({}, 0.0, g.dtype(), g.device());
                  Tensor gt =
                      tensor_first ? native::where(md, g, zero) : native::where(md, zero, g);
                  return std::vector<Tensor>{native::sum_to(gt, shape).to(tdt)};
                },
                {md});
}

}  // namespace

Tensor where(const Tensor& mask, const Tensor& a, double b) {
  return where_scalar(mask, a, b, true);
}
Tensor where(const Tensor& mask, double a, const Tensor& b) {
  return where_scalar(mask, b, a, false);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Tensor out = native::masked_fill(x, mask, value);
  if (!autograd::any_requires_grad({x})) return out;
  Tensor md = mask.detach();
  Shape shape = x.sizes();
  return record(
      out, "masked_fill", {x},
      [=](const Tensor& g, const std::vector<bool>&) {
        return std::vector<Tensor>{native::sum_to(native::masked_fill(g, md, 0.0), shape)};
      },
      {md});
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return unary_record(native::triangle(x, diagonal, true), x, "tril", Saves::kInput,
                      [diagonal](const Tensor& g, const Tensor&, const Tensor&) {
                        return native::triangle(g, diagonal, true);
                      });
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return unary_record(native::triangle(x, diagonal, false), x, "triu", Saves::kInput,
                      [diagonal](const Tensor& g, const Tensor&, const Tensor&) {
                        return native::triangle(g, diagonal, false);
                      });
}

Tensor eq(const Tensor& a, const Tensor& b) { return native::compare(CompareOp::kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return native::compare(CompareOp::kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return native::compare(CompareOp::kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return native::compare(CompareOp::kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return native::compare(CompareOp::kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return native::compare(CompareOp::kGe, a, b); }
Tensor eq(const Tensor& a, double s) { return native::compare_scalar(CompareOp::kEq, a, s); }
Tensor lt(const Tensor& a, double s) { return native::compare_scalar(CompareOp::kLt, a, s); }
Tensor gt(const Tensor& a, double s) { return native::compare_scalar(CompareOp::kGt, a, s); }

}  // namespace cohort
