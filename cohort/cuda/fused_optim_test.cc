// Parity of native/fused_optim.h's multi-tensor updates on cuda:0 with the
// CPU reference loops, over more tensors than one launch takes and tensors
// longer than one block's chunk; and of cohort/optim's SGD, AdamW and
// clip_grad_norm on device parameters with the same optimizers on the CPU.
// The device contracts a*b+c into FMA (as the CPU's avx2 / avx512 paths do),
// so float32 results agree to 1e-5 relative, not bit for bit; and where a
// result cancels (a momentum buffer or a parameter passing through zero) the
// roundings of its O(1) terms differ by a few 1e-7 absolute: 2e-6 allows them.
#include "cohort/core/native/fused_optim.h"

#include <cmath>

#include "cohort/cuda/pointwise_testing.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"

namespace cohort::cuda {
namespace {

using testing::gpu;
using testing::random_tensor;
using testing::same_values;

// 60 tensors (two launches), sizes from 1 to past two chunks of 65536.
std::vector<Tensor> tensors(uint64_t seed) {
  std::vector<Tensor> out;
  for (int i = 0; i < 60; ++i) {
    const int64_t n = i == 7 ? 140001 : 1 + (i * 977) % 5000;
    out.push_back(random_tensor({n}, seed + i));
  }
  return out;
}

std::vector<Tensor> to_gpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(gpu()));
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

::testing::AssertionResult all_close(const std::vector<Tensor>& d, const std::vector<Tensor>& h) {
  for (size_t i = 0; i < d.size(); ++i) {
    ::testing::AssertionResult r = same_values(d[i], h[i], 1e-5, 2e-6);
    if (!r) return r << " (tensor " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(CudaFusedOptim, SgdStepMatchesTheReference) {
  COHORT_REQUIRE_CUDA();
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov);
    std::vector<Tensor> hp = tensors(100), hg = tensors(200), hb = tensors(300);
    std::vector<Tensor> dp = to_gpu(hp), dg = to_gpu(hg), db = to_gpu(hb);
    native::SgdStep s{0.1, 0.9, nesterov ? 0.0 : 0.1, 1e-2, nesterov, false};
    std::vector<uint8_t> first(hp.size());
    for (size_t i = 0; i < first.size(); ++i) first[i] = i % 3 == 0;
    for (int step = 0; step < 3; ++step) {
      native::sgd_step(hp, hg, hb, first, s);
      native::sgd_step(dp, dg, db, first, s);
      std::fill(first.begin(), first.end(), 0);
    }
    EXPECT_TRUE(all_close(dp, hp));
    EXPECT_TRUE(all_close(db, hb));
  }
}

TEST(CudaFusedOptim, AdamStepMatchesTheReference) {
  COHORT_REQUIRE_CUDA();
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      SCOPED_TRACE(std::to_string(decoupled) + std::to_string(amsgrad));
      std::vector<Tensor> hp = tensors(400), hg = tensors(500);
      std::vector<Tensor> hm, hv, hx;
      for (const Tensor& p : hp) {
        hm.push_back(Tensor::zeros(p.sizes()));
        hv.push_back(Tensor::zeros(p.sizes()));
        hx.push_back(amsgrad ? Tensor::zeros(p.sizes()) : Tensor());
      }
      std::vector<Tensor> dp = to_gpu(hp), dg = to_gpu(hg), dm = to_gpu(hm), dv = to_gpu(hv);
      std::vector<Tensor> dx;
      for (const Tensor& x : hx) dx.push_back(amsgrad ? x.to(gpu()) : Tensor());
      native::AdamStep s{1e-3, 0.9, 0.999, 1e-8, 0.1, amsgrad, false, decoupled};
      for (int step = 1; step <= 3; ++step) {
        // Steps differ between parameters (one was added later).
        std::vector<double> steps(hp.size(), step);
        steps[5] = step + 10;
        native::adam_step(hp, hg, hm, hv, hx, steps, s);
        native::adam_step(dp, dg, dm, dv, dx, steps, s);
      }
      EXPECT_TRUE(all_close(dp, hp));
      EXPECT_TRUE(all_close(dm, hm));
      EXPECT_TRUE(all_close(dv, hv));
    }
  }
}

TEST(CudaFusedOptim, TotalNormAndScaling) {
  COHORT_REQUIRE_CUDA();
  std::vector<Tensor> h = tensors(600);
  std::vector<Tensor> d = to_gpu(h);
  for (double p : {2.0, 1.0, 3.0, optim::kInfNorm}) {
    SCOPED_TRACE(p);
    Tensor dn = native::total_norm(d, p);
    ASSERT_TRUE(dn.is_cuda());
    ASSERT_EQ(dn.dim(), 0);
    EXPECT_TRUE(same_values(dn, native::total_norm(h, p), 1e-12, 0));
  }
  // Clipping to a tenth of the norm scales every tensor; to ten times, none.
  Tensor dn = native::total_norm(d, 2.0);
  const double norm = dn.item<double>();
  std::vector<Tensor> hc = clones(h), dc = to_gpu(h);
  native::scale_by_norm(hc, native::total_norm(hc, 2.0), norm / 10);
  native::scale_by_norm(dc, dn, norm / 10);
  EXPECT_TRUE(all_close(dc, hc));
  std::vector<Tensor> du = to_gpu(h);
  native::scale_by_norm(du, dn, norm * 10);
  EXPECT_TRUE(all_close(du, h));
}

// A small "model": parameters of several shapes, one not contiguous.
struct Params {
  std::vector<Tensor> list;
  explicit Params(Device device) {
    list.push_back(random_tensor({17, 33}, 700).to(device).transpose(0, 1).set_requires_grad(true));
    list.push_back(random_tensor({17}, 701).to(device).set_requires_grad(true));
    list.push_back(random_tensor({70000}, 702).to(device).set_requires_grad(true));
  }
  void set_grads(int step) {
    for (size_t i = 0; i < list.size(); ++i) {
      Tensor g = random_tensor(list[i].sizes(), 800 + 10 * step + i).to(list[i].device());
      list[i].set_grad(g);
    }
  }
};

TEST(CudaFusedOptim, OptimizersOnDeviceParametersFollowTheCpu) {
  COHORT_REQUIRE_CUDA();
  Params hs(kCPU), ds(gpu()), ha(kCPU), da(gpu());
  optim::SGD hsgd(hs.list, optim::SGDOptions{0.05, 0.9, 0.0, 1e-3, true});
  optim::SGD dsgd(ds.list, optim::SGDOptions{0.05, 0.9, 0.0, 1e-3, true});
  optim::AdamW hadam(ha.list, optim::AdamWOptions{1e-2});
  optim::AdamW dadam(da.list, optim::AdamWOptions{1e-2});
  for (int step = 0; step < 3; ++step) {
    for (Params* p : {&hs, &ds, &ha, &da}) p->set_grads(step);
    const double hn = optim::clip_grad_norm(hs.list, 1.0);
    const double dn = optim::clip_grad_norm(ds.list, 1.0);
    EXPECT_NEAR(dn, hn, 1e-6 * hn);
    hsgd.step();
    dsgd.step();
    hadam.step();
    dadam.step();
  }
  for (size_t i = 0; i < hs.list.size(); ++i) {
    EXPECT_TRUE(same_values(ds.list[i], hs.list[i], 1e-5, 2e-6)) << i;
    EXPECT_TRUE(same_values(ds.list[i].grad(), hs.list[i].grad(), 1e-5, 1e-7)) << i;
    EXPECT_TRUE(same_values(da.list[i], ha.list[i], 1e-5, 2e-6)) << i;
  }
  EXPECT_NEAR(optim::grad_norm(da.list), optim::grad_norm(ha.list), 1e-6);
}

}  // namespace
}  // namespace cohort::cuda
