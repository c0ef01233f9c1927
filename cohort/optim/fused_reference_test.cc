// core's multi-tensor reference loops (native/fused_optim.h), the oracle of
// the device kernels' tests, against the optimizers' own CPU paths: the same
// formulas give the same values (to the last bits that FMA contraction on
// the avx2 / avx512 paths may change).
#include "cohort/core/native/fused_optim.h"

#include <gtest/gtest.h>

#include "cohort/core/native/test_util.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"

namespace cohort::optim {
namespace {

using cohort::testing::random_tensor;

std::vector<Tensor> make_params(uint64_t seed) {
  return {random_tensor({7, 9}, seed).set_requires_grad(true),
          random_tensor({300}, seed + 1).set_requires_grad(true)};
}

void set_grads(std::vector<Tensor>& ps, uint64_t seed) {
  for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(random_tensor(ps[i].sizes(), seed + i));
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& ps) {
  std::vector<Tensor> g;
  for (const Tensor& p : ps) g.push_back(p.grad());
  return g;
}

std::vector<Tensor> detached(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone());
  return out;
}

TEST(FusedReference, SgdMatchesTheOptimizer) {
  std::vector<Tensor> ps = make_params(1);
  std::vector<Tensor> ref = detached(ps);
  std::vector<Tensor> bufs{Tensor::zeros({7, 9}), Tensor::zeros({300})};
  SGD opt(ps, SGDOptions{0.1, 0.9, 0.0, 1e-2, true});
  native::SgdStep s{0.1, 0.9, 0.0, 1e-2, true, false};
  std::vector<uint8_t> first{1, 1};
  for (int step = 0; step < 3; ++step) {
    set_grads(ps, 10 + step);
    opt.step();
    native::sgd_step(ref, grads_of(ps), bufs, first, s);
    first = {0, 0};
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(allclose(ps[i], ref[i], 1e-6, 1e-7)) << i;
}

TEST(FusedReference, AdamWMatchesTheOptimizer) {
  std::vector<Tensor> ps = make_params(2);
  std::vector<Tensor> ref = detached(ps);
  std::vector<Tensor> m{Tensor::zeros({7, 9}), Tensor::zeros({300})};
  std::vector<Tensor> v{Tensor::zeros({7, 9}), Tensor::zeros({300})};
  AdamW opt(ps, AdamWOptions{1e-2});
  native::AdamStep s{1e-2, 0.9, 0.999, 1e-8, 1e-2, false, false, true};
  for (int step = 1; step <= 3; ++step) {
    set_grads(ps, 20 + step);
    opt.step();
    native::adam_step(ref, grads_of(ps), m, v, {}, {double(step), double(step)}, s);
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(allclose(ps[i], ref[i], 1e-6, 1e-7)) << i;
}

TEST(FusedReference, TotalNormMatchesGradNorm) {
  std::vector<Tensor> ps = make_params(3);
  set_grads(ps, 30);
  for (double p : {2.0, 1.0, 3.0, kInfNorm}) {
    const double want = grad_norm(ps, p);
    EXPECT_NEAR(native::total_norm(grads_of(ps), p).item<double>(), want, 1e-12 * want) << p;
  }
  EXPECT_THROW(native::total_norm(grads_of(ps), 0.0), InvalidArgument);
  EXPECT_THROW(native::sgd_step(detached(ps), {Tensor::zeros({2})}, {}, {}, native::SgdStep{}),
               InvalidArgument);
}

}  // namespace
}  // namespace cohort::optim
