// Schedulers against PyTorch's step() semantics (values computed by hand
// from torch.optim.lr_scheduler's formulas).
#include "cohort/optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "cohort/optim/sgd.h"

namespace cohort::optim {
namespace {

Tensor param() {
  Tensor t = Tensor::ones({1});
  t.set_requires_grad(true);
  return t;
}

TEST(StepLR, DecaysEveryStepSize) {
  SGD opt({param()}, {.lr = 1.0});
  StepLR sched(opt, 3, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 8; ++i) {
    lrs.push_back(opt.lr());
    sched.step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25}));
  EXPECT_EQ(sched.last_epoch(), 8);
  EXPECT_EQ(sched.get_last_lr(), std::vector<double>{0.25});
}

TEST(CosineAnnealingLR, FollowsTheCosine) {
  SGD opt({param()}, {.lr = 0.1});
  CosineAnnealingLR sched(opt, 10, 0.001);
  for (int e = 0; e <= 25; ++e) {
    // Closed form; PyTorch's recursive form agrees with it to rounding.
    double want = 0.001 + (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * e / 10)) / 2;
    EXPECT_NEAR(opt.lr(), want, 1e-12) << "epoch " << e;
    sched.step();
  }
}

TEST(LinearLR, WarmsUp) {
  SGD opt({param()}, {.lr = 0.3});
  LinearLR sched(opt, 0.25, 1.0, 3);
  std::vector<double> want = {0.075, 0.15, 0.225, 0.3, 0.3, 0.3};
  for (double w : want) {
    EXPECT_NEAR(opt.lr(), w, 1e-12);
    sched.step();
  }
  EXPECT_THROW(LinearLR(opt, 0.0), InvalidArgument);
}

TEST(LRScheduler, ChainsAndRoundTrips) {
  SGD opt({param()}, {.lr = 1.0});
  LinearLR warm(opt, 0.5, 1.0, 2);
  StepLR decay(opt, 2, 0.1);  // base_lr is the initial lr (1.0), not the warmed one
  EXPECT_EQ(decay.base_lrs(), std::vector<double>{1.0});
  EXPECT_NEAR(opt.lr(), 0.5, 1e-12);
  warm.step();
  decay.step();
  EXPECT_NEAR(opt.lr(), 0.75, 1e-12);
  warm.step();
  decay.step();  // epoch 2: warm-up done (x 4/3), decay (x 0.1)
  EXPECT_NEAR(opt.lr(), 0.1, 1e-12);

  TensorDict sd = decay.state_dict();
  SGD opt2({param()}, {.lr = 1.0});
  StepLR decay2(opt2, 2, 0.1);
  decay2.load_state_dict(sd);
  EXPECT_EQ(decay2.last_epoch(), 2);
  EXPECT_EQ(decay2.get_last_lr(), decay.get_last_lr());
}

}  // namespace
}  // namespace cohort::optim
