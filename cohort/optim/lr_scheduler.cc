#include "cohort/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

namespace cohort::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    ParamGroup& group = optimizer.param_group(g);
    if (std::isnan(group.initial_lr)) group.initial_lr = group.option("lr");
    base_lrs_.push_back(group.initial_lr);
  }
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  std::vector<double> lrs = get_lr();
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.param_group(g).set_option("lr", lrs[g]);
  last_lr_ = std::move(lrs);
}

TensorDict LRScheduler::state_dict() const {
  TensorDict out;
  out.insert("last_epoch", Tensor::scalar(static_cast<double>(last_epoch_), kInt64));
  out.insert("step_count", Tensor::scalar(static_cast<double>(step_count_), kInt64));
  out.insert("base_lrs", Tensor::from_vector(base_lrs_));
  out.insert("last_lrs", Tensor::from_vector(last_lr_));
  return out;
}

void LRScheduler::load_state_dict(const TensorDict& dict) {
  for (const auto& [key, t] : dict)
    COHORT_CHECK(
        key == "last_epoch" || key == "step_count" || key == "base_lrs" || key == "last_lrs",
        "LRScheduler: load_state_dict: unexpected key '{}'", key);
  const Tensor& base = dict.at("base_lrs");
  const Tensor& last = dict.at("last_lrs");
  COHORT_CHECK(base.numel() == static_cast<int64_t>(base_lrs_.size()) &&
                   last.numel() == static_cast<int64_t>(base_lrs_.size()),
               "LRScheduler: load_state_dict: the state dict has {} groups, the optimizer {}",
               base.numel(), base_lrs_.size());
  last_epoch_ = dict.at("last_epoch").item<int64_t>();
  step_count_ = dict.at("step_count").item<int64_t>();
  base_lrs_ = base.to_vector<double>();
  last_lr_ = last.to_vector<double>();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  COHORT_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer().num_param_groups(); ++g) {
    double lr = group_lr(g);
    if (last_epoch() != 0 && last_epoch() % step_size_ == 0) lr *= gamma_;
    out.push_back(lr);
  }
  return out;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  COHORT_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be positive, got {}", t_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  const double pi = std::numbers::pi;
  const int64_t e = last_epoch();
  const double t = static_cast<double>(t_max_);
  std::vector<double> out;
  for (size_t g = 0; g < optimizer().num_param_groups(); ++g) {
    double lr = group_lr(g), base = base_lrs()[g];
    if (e == 0) {
      out.push_back(lr);
    } else if ((e - 1 - t_max_) % (2 * t_max_) == 0) {
      out.push_back(lr + (base - eta_min_) * (1 - std::cos(pi / t)) / 2);
    } else {
      out.push_back((1 + std::cos(pi * e / t)) / (1 + std::cos(pi * (e - 1) / t)) *
                        (lr - eta_min_) +
                    eta_min_);
    }
  }
  return out;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  COHORT_CHECK(start_factor > 0 && start_factor <= 1,
               "LinearLR: start_factor must be in (0, 1], got {}", start_factor);
  COHORT_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got {}",
               end_factor);
  COHORT_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got {}", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  const int64_t e = last_epoch();
  std::vector<double> out;
  for (size_t g = 0; g < optimizer().num_param_groups(); ++g) {
    double lr = group_lr(g);
    if (e == 0) {
      out.push_back(lr * start_factor_);
    } else if (e > total_iters_) {
      out.push_back(lr);
    } else {
      out.push_back(lr * (1.0 + (end_factor_ - start_factor_) /
                                    (static_cast<double>(total_iters_) * start_factor_ +
                                     static_cast<double>(e - 1) * (end_factor_ - start_factor_))));
    }
  }
  return out;
}

}  // namespace cohort::optim
