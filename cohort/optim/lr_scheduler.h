// Learning-rate schedulers, as torch.optim.lr_scheduler (PyTorch 1.13
// semantics of step()): constructing a scheduler performs the initial step
// (last_epoch becomes 0 and the lr of epoch 0 is set on the optimizer, e.g.
// LinearLR multiplies it by start_factor); each step() then advances
// last_epoch by one and sets the lr of the new epoch. Call it after
// optimizer.step(), once per epoch or per iteration as your schedule counts.
// Like PyTorch, the update is chainable: each step scales the optimizer's
// current lr, so several schedulers may act on one optimizer. base_lrs are
// the groups' initial_lr (recorded by the first scheduler attached).
// The scheduler keeps a reference to the optimizer, which must outlive it.
// Thread safety: one thread at a time, with the optimizer.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/core/tensor_dict.h"
#include "cohort/optim/optimizer.h"

namespace cohort::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  // The lr of every group set by the last step.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // "last_epoch", "step_count" (int64 0-d), "base_lrs", "last_lrs" (float64
  // [groups]). load_state_dict checks the group count and restores them (it
  // does not change the optimizer's lr, which the optimizer's state holds).
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Derived constructors call this last (it calls get_lr()).
  void initial_step() { step(); }
  // The lrs for last_epoch(), given the optimizer's current ones (chainable form).
  virtual std::vector<double> get_lr() const = 0;
  Optimizer& optimizer() const { return optimizer_; }
  double group_lr(size_t g) const { return optimizer_.lr(g); }
  int64_t step_count() const { return step_count_; }

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
};

// lr = base_lr * gamma^(epoch / step_size) (integer division).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2, in
// PyTorch's recursive form (continues as a cosine wave past T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up: the factor goes from start_factor at epoch 0 to end_factor
// at total_iters and stays there: lr = base_lr * (start + (end - start) *
// min(epoch, total_iters) / total_iters).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() const override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

}  // namespace cohort::optim
