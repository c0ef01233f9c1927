// nn::Flatten (torch.nn.Flatten: dims start_dim..end_dim merged, default
// start_dim = 1 keeps the batch dim; a view when the layout allows) and
// nn::Identity. Stateless; safe to share between threads.
#pragma once

#include "cohort/nn/module.h"

namespace cohort::nn {

class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Cloneable("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override {
    return fmt::format("start_dim={}, end_dim={}", start_dim_, end_dim_);
  }

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

class Identity : public Cloneable<Identity> {
 public:
  Identity() : Cloneable("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace cohort::nn
