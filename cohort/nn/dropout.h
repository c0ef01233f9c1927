// nn::Dropout: inverted dropout, as torch.nn.Dropout. In training mode each
// element is zeroed with probability p and the rest scaled by 1/(1-p); in
// eval mode forward is the identity. Any shape.
// Randomness: the module owns a Generator seeded from the one given to the
// constructor (one draw), so masks are reproducible. clone() copies that
// generator's state; replicate() shares it (Generator locks itself), so
// replicas on different threads draw different masks.
// nn::Dropout2d: the same for whole channels, as torch.nn.Dropout2d: each
// (n, c) plane of [N, C, H, W] (or c of [C, H, W]) is zeroed with probability
// p, the rest scaled by 1/(1-p).
#pragma once

#include <memory>

#include "cohort/core/random.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

class Dropout : public Cloneable<Dropout> {
 public:
  Dropout(double p, Generator& gen);

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("p={}", p_); }

  double p() const { return p_; }
  Generator& generator() const { return *gen_; }

 protected:
  void on_copy(bool deep) override;

 private:
  double p_;
  std::shared_ptr<Generator> gen_;
};

class Dropout2d : public Cloneable<Dropout2d> {
 public:
  Dropout2d(double p, Generator& gen);

  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("p={}", p_); }

  double p() const { return p_; }
  Generator& generator() const { return *gen_; }

 protected:
  void on_copy(bool deep) override;

 private:
  double p_;
  std::shared_ptr<Generator> gen_;
};

}  // namespace cohort::nn
