// SGD, Adam, AdamW against hand-computed values of PyTorch's update rules,
// param groups and optimizer state dicts.
#include <gtest/gtest.h>

#include <cmath>

#include "cohort/autograd/ops.h"
#include "cohort/optim/optim.h"

namespace cohort::optim {
namespace {

Tensor param(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v);
  t.set_requires_grad(true);
  return t;
}

void set_grad(const Tensor& p, std::vector<float> g) { p.set_grad(Tensor::from_vector(g)); }

float at(const Tensor& t, int64_t i) { return t.to_vector<float>()[static_cast<size_t>(i)]; }

TEST(SGD, PlainAndWeightDecay) {
  Tensor p = param({1.0f, -2.0f});
  SGD opt({p}, {.lr = 0.1, .weight_decay = 0.1});
  set_grad(p, {0.5f, 0.25f});
  opt.step();
  // g + wd p = {0.6, 0.05}; p - lr g
  EXPECT_FLOAT_EQ(at(p, 0), 0.94f);
  EXPECT_FLOAT_EQ(at(p, 1), -2.005f);
  EXPECT_TRUE(opt.state_dict().find("state.0.momentum_buffer") == nullptr);
}

TEST(SGD, MomentumDampening) {
  Tensor p = param({1.0f});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
  set_grad(p, {0.5f});
  opt.step();  // first step: buf = g = 0.5 (no dampening), p = 1 - 0.05
  EXPECT_FLOAT_EQ(at(p, 0), 0.95f);
  set_grad(p, {0.5f});
  opt.step();  // buf = 0.9 * 0.5 + 0.9 * 0.5 = 0.9, p = 0.95 - 0.09
  EXPECT_NEAR(at(p, 0), 0.86f, 1e-6);
  set_grad(p, {-1.0f});
  opt.step();  // buf = 0.81 - 0.9 = -0.09, p = 0.86 + 0.009
  EXPECT_NEAR(at(p, 0), 0.869f, 1e-6);
  EXPECT_NEAR(at(opt.state_dict().at("state.0.momentum_buffer"), 0), -0.09f, 1e-6);
}

TEST(SGD, Nesterov) {
  Tensor p = param({1.0f});
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  set_grad(p, {0.5f});
  opt.step();  // buf = 0.5, d = 0.5 + 0.45 = 0.95
  EXPECT_NEAR(at(p, 0), 0.905f, 1e-6);
  set_grad(p, {0.5f});
  opt.step();  // buf = 0.95, d = 0.5 + 0.855 = 1.355
  EXPECT_NEAR(at(p, 0), 0.7695f, 1e-6);
  EXPECT_THROW(SGD({p}, {.lr = 0.1, .nesterov = true}), InvalidArgument);
  EXPECT_THROW(SGD({p}, {.lr = -1}), InvalidArgument);
}

TEST(SGD, MaximizeSkipsMissingGradsAndZeroGrad) {
  Tensor p = param({1.0f}), q = param({3.0f});
  SGD opt({p, q}, {.lr = 0.5, .maximize = true});
  set_grad(p, {1.0f});
  opt.step();
  EXPECT_FLOAT_EQ(at(p, 0), 1.5f);
  EXPECT_FLOAT_EQ(at(q, 0), 3.0f);  // no grad: untouched
  Tensor g = p.grad();
  opt.zero_grad();
  EXPECT_TRUE(p.grad().is_same(g));
  EXPECT_FLOAT_EQ(at(g, 0), 0.0f);
  opt.zero_grad(true);
  EXPECT_FALSE(p.grad().defined());
  EXPECT_THROW(SGD({p, p}, {}), InvalidArgument);
}

// Adam in double precision, written out from the PyTorch 1.13 formulas.
struct AdamRef {
  double lr, b1, b2, eps, wd;
  bool amsgrad, decoupled;
  double m = 0, v = 0, vmax = 0;
  int step = 0;
  double update(double p, double g) {
    ++step;
    if (decoupled)
      p *= 1 - lr * wd;
    else
      g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    vmax = std::max(vmax, v);
    double vh = amsgrad ? vmax : v;
    double denom = std::sqrt(vh) / std::sqrt(1 - std::pow(b2, step)) + eps;
    return p - lr / (1 - std::pow(b1, step)) * m / denom;
  }
};

void run_adam(bool decoupled, bool amsgrad) {
  Tensor p = param({0.5f});
  AdamOptions o{.lr = 0.01,
                .beta1 = 0.8,
                .beta2 = 0.95,
                .eps = 1e-6,
                .weight_decay = 0.1,
                .amsgrad = amsgrad};
  std::unique_ptr<Optimizer> opt;
  if (decoupled) {
    opt =
        std::make_unique<AdamW>(std::vector<Tensor>{p}, AdamWOptions{.lr = o.lr,
                                                                     .beta1 = o.beta1,
                                                                     .beta2 = o.beta2,
                                                                     .eps = o.eps,
                                                                     .weight_decay = o.weight_decay,
                                                                     .amsgrad = amsgrad});
  } else {
    opt = std::make_unique<Adam>(std::vector<Tensor>{p}, o);
  }
  AdamRef ref{0.01, 0.8, 0.95, 1e-6, 0.1, amsgrad, decoupled};
  double want = 0.5;
  const float grads[] = {1.0f, -0.5f, 0.1f, 2.0f, -3.0f, 0.0f};
  for (float g : grads) {
    set_grad(p, {g});
    opt->step();
    want = ref.update(want, g);
    EXPECT_NEAR(at(p, 0), want, 1e-6) << "step " << ref.step;
  }
  TensorDict sd = opt->state_dict();
  EXPECT_EQ(sd.at("state.0.step").item<float>(), 6.0f);
  EXPECT_NEAR(sd.at("state.0.exp_avg").item<float>(), ref.m, 1e-6);
  EXPECT_NEAR(sd.at("state.0.exp_avg_sq").item<float>(), ref.v, 1e-6);
  EXPECT_EQ(sd.contains("state.0.max_exp_avg_sq"), amsgrad);
}

TEST(Adam, MatchesFormula) { run_adam(false, false); }
TEST(Adam, AmsgradMatchesFormula) { run_adam(false, true); }
TEST(AdamW, MatchesFormula) { run_adam(true, false); }
TEST(AdamW, AmsgradMatchesFormula) { run_adam(true, true); }

TEST(Adam, FirstStepMovesByLr) {
  // With bias correction, the first step is lr * g / (|g| + eps) ~ lr.
  Tensor p = param({1.0f, 1.0f, 1.0f});
  Adam opt({p}, {.lr = 0.1});
  set_grad(p, {0.5f, -2.0f, 1e-3f});
  opt.step();
  EXPECT_NEAR(at(p, 0), 0.9f, 1e-6);
  EXPECT_NEAR(at(p, 1), 1.1f, 1e-6);
  EXPECT_NEAR(at(p, 2), 0.9f, 1e-5);
  EXPECT_EQ(AdamW({p}).param_groups()[0].option("weight_decay"), 1e-2);
  EXPECT_THROW(Adam({p}, {.beta1 = 1.0}), InvalidArgument);
}

TEST(Optimizer, LargeParameterMatchesSmall) {
  // The update is elementwise: a big tensor (split over threads) gives the
  // same values as updating elements one by one.
  Generator gen(1);
  Tensor big = randn({300000}, gen);
  Tensor grad = randn({300000}, gen);
  Tensor p = big.clone();
  p.set_requires_grad(true);
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  p.set_grad(grad.clone());
  opt.step();
  opt.step();
  std::vector<float> pv = big.to_vector<float>(), gv = grad.to_vector<float>();
  for (size_t i : {size_t{0}, size_t{123456}, size_t{299999}}) {
    float x = pv[i], g = gv[i];
    float d = g + 0.01f * x;
    float buf = d;
    x = x - 0.1f * buf;
    d = g + 0.01f * x;
    buf = 0.9f * buf + d;
    x = x - 0.1f * buf;
    EXPECT_NEAR(at(p, static_cast<int64_t>(i)), x, 1e-6);
  }
}

TEST(Optimizer, NonContiguousParameterIsUpdatedInPlace) {
  Tensor base = Tensor::zeros({3, 4});
  Tensor p = base.transpose(0, 1);  // [4, 3], not contiguous
  ASSERT_FALSE(p.is_contiguous());
  p.set_requires_grad(true);
  p.set_grad(Tensor::arange(0.0, 12.0).view({4, 3}));
  SGD opt({p}, {.lr = 0.5, .momentum = 0.9});
  opt.step();
  EXPECT_FLOAT_EQ(at(p.contiguous(), 5), -2.5f);             // row 1, col 2 of p
  EXPECT_FLOAT_EQ(at(base.contiguous(), 2 * 4 + 1), -2.5f);  // the same element of base
  Tensor q = Tensor::zeros({2, 2}).transpose(0, 1);
  q.set_requires_grad(true);
  q.set_grad(Tensor::ones({2, 2}));
  Adam adam({q}, {.lr = 0.1});
  adam.step();
  EXPECT_NEAR(at(q.contiguous(), 3), -0.1f, 1e-6);
}

TEST(Optimizer, ParamGroupsAndLr) {
  Tensor a = param({1.0f}), b = param({1.0f});
  SGD opt({a}, {.lr = 0.1});
  opt.add_param_group({b}, {{"lr", 0.01}});
  EXPECT_EQ(opt.num_param_groups(), 2u);
  EXPECT_EQ(opt.lr(1), 0.01);
  set_grad(a, {1.0f});
  set_grad(b, {1.0f});
  opt.step();
  EXPECT_FLOAT_EQ(at(a, 0), 0.9f);
  EXPECT_FLOAT_EQ(at(b, 0), 0.99f);
  opt.set_lr(0.5);
  EXPECT_EQ(opt.lr(1), 0.5);
  EXPECT_THROW(opt.add_param_group({a}), InvalidArgument);  // already in group 0
  EXPECT_THROW(opt.add_param_group({param({1.0f})}, {{"nope", 1.0}}), InvalidArgument);
}

// Typed group options: every field of the struct, a misspelt field would not
// compile; the string form still works beside it.
TEST(Optimizer, TypedParamGroupOptions) {
  Tensor a = param({1.0f}), b = param({1.0f}), c = param({1.0f});
  SGD sgd({a}, {.lr = 0.1});
  sgd.add_param_group({b}, SGDOptions{.lr = 0.01, .momentum = 0.5});
  sgd.add_param_group({c}, {{"lr", 0.2}});
  EXPECT_EQ(sgd.lr(1), 0.01);
  EXPECT_EQ(sgd.param_group(1).option("momentum"), 0.5);
  EXPECT_EQ(sgd.lr(2), 0.2);
  EXPECT_EQ(sgd.param_group(2).option("momentum"), 0.0);  // the defaults for the rest
  EXPECT_THROW(sgd.add_param_group({param({1.0f})}, {.lr = -1.0}), InvalidArgument);

  // nanoGPT's AdamW groups: decay on matrices only.
  Tensor w = param({1.0f, 1.0f}), bias = param({1.0f});
  AdamWOptions o{.lr = 0.1, .beta2 = 0.95, .weight_decay = 0.5};
  AdamW adamw({w}, o);
  o.weight_decay = 0;
  adamw.add_param_group({bias}, o);
  EXPECT_EQ(adamw.param_group(0).option("weight_decay"), 0.5);
  EXPECT_EQ(adamw.param_group(1).option("weight_decay"), 0.0);
  EXPECT_EQ(adamw.param_group(1).option("beta2"), 0.95);
  set_grad(w, {0.0f, 0.0f});
  set_grad(bias, {0.0f});
  adamw.step();  // zero gradients: only the decoupled decay moves w
  EXPECT_FLOAT_EQ(at(w, 0), 1.0f - 0.1f * 0.5f);
  EXPECT_FLOAT_EQ(at(bias, 0), 1.0f);
  Adam adam({param({1.0f})});
  adam.add_param_group({param({1.0f})}, AdamOptions{.eps = 1e-6});
  EXPECT_EQ(adam.param_group(1).option("eps"), 1e-6);
}

TEST(Optimizer, StateDictRoundTrip) {
  Generator gen(2);
  auto make = [&] {
    Tensor w = randn({3, 4}, gen), c = randn({4}, gen);
    w.set_requires_grad(true);
    c.set_requires_grad(true);
    return std::vector<Tensor>{w, c};
  };
  std::vector<Tensor> p1 = make();
  std::vector<Tensor> p2 = {p1[0].detach().clone(), p1[1].detach().clone()};
  for (auto& t : p2) t.set_requires_grad(true);
  Adam a1(p1, {.lr = 0.01, .amsgrad = true});
  Adam a2(p2, {.lr = 0.5});
  std::vector<Tensor> grads = {randn({3, 4}, gen), randn({4}, gen)};
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 2; ++i) p1[i].set_grad(grads[i].clone());
    a1.step();
  }
  TensorDict sd = a1.state_dict();
  EXPECT_EQ(sd.keys(),
            (std::vector<std::string>{
                "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
                "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.max_exp_avg_sq",
                "param_groups.0.lr", "param_groups.0.beta1", "param_groups.0.beta2",
                "param_groups.0.eps", "param_groups.0.weight_decay", "param_groups.0.amsgrad",
                "param_groups.0.maximize", "param_groups.0.params"}));
  a2.load_state_dict(sd);
  EXPECT_EQ(a2.lr(), 0.01);
  for (int i = 0; i < 2; ++i) {
    NoGradGuard g;
    p2[i].copy_(p1[i]);
  }
  for (int i = 0; i < 2; ++i) {
    p1[i].set_grad(grads[i].clone());
    p2[i].set_grad(grads[i].clone());
  }
  a1.step();
  a2.step();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(equal(p1[i], p2[i]));
  // Loaded state is a copy: stepping a2 did not move a1's buffers twice.
  EXPECT_EQ(a1.state_dict().at("state.0.step").item<float>(), 4.0f);

  // Mismatches name the key and both shapes; nothing changes on failure.
  TensorDict bad;
  for (const auto& [k, t] : sd) bad.insert(k, k == "state.1.exp_avg" ? Tensor::zeros({5}) : t);
  try {
    a2.load_state_dict(bad);
    FAIL();
  } catch (const InvalidArgument& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("state.1.exp_avg"), std::string::npos) << w;
    EXPECT_NE(w.find("[5]"), std::string::npos) << w;
    EXPECT_NE(w.find("[4]"), std::string::npos) << w;
  }
  EXPECT_EQ(a2.state_dict().at("state.0.step").item<float>(), 4.0f);
  SGD sgd(p2, {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(sgd.load_state_dict(sd), InvalidArgument);  // Adam's keys
  SGD one({p2[0]}, {.lr = 0.1});
  EXPECT_THROW(one.load_state_dict(sgd.state_dict()), InvalidArgument);  // group sizes
}

TEST(ClipGradNorm, ScalesWhenAboveMax) {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {4.0f});
  Tensor c = param({1});  // no grad: ignored
  double total = clip_grad_norm({a, b, c}, 1.0);
  EXPECT_DOUBLE_EQ(total, 5.0);
  double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_NEAR(at(a.grad(), 0), 3.0 * coef, 1e-7);
  EXPECT_NEAR(at(b.grad(), 0), 4.0 * coef, 1e-7);
  // Below the max: unchanged.
  set_grad(a, {0.3f, 0.0f});
  set_grad(b, {0.4f});
  EXPECT_NEAR(clip_grad_norm({a, b}, 10.0), 0.5, 1e-7);
  EXPECT_FLOAT_EQ(at(a.grad(), 0), 0.3f);
  // Other norms.
  set_grad(a, {3.0f, -7.0f});
  set_grad(b, {4.0f});
  EXPECT_NEAR(grad_norm({a, b}, 1.0), 14.0, 1e-6);
  EXPECT_NEAR(grad_norm({a, b}, kInfNorm), 7.0, 1e-6);
  EXPECT_NEAR(grad_norm({a, b}, 3.0), std::cbrt(27.0 + 343 + 64), 1e-5);
  EXPECT_NEAR(clip_grad_norm({a, b}, 3.5, kInfNorm), 7.0, 1e-6);
  EXPECT_NEAR(at(a.grad(), 1), -3.5, 1e-5);
  set_grad(b, {NAN});
  EXPECT_THROW(clip_grad_norm({a, b}, 1.0, 2.0, true), InvalidArgument);
  EXPECT_FLOAT_EQ(at(a.grad(), 0), 1.5f);  // unchanged by the failed call
  EXPECT_EQ(clip_grad_norm({}, 1.0), 0.0);
}

}  // namespace
}  // namespace cohort::optim
