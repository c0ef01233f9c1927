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

// What both share: p, the module's own generator and how copies treat it.
template <typename Derived>
class DropoutBase : public Cloneable<Derived> {
 public:
  std::string extra_repr() const override { return fmt::format("p={}", p_); }
  double p() const { return p_; }
  Generator& generator() const { return *gen_; }

 protected:
  DropoutBase(const char* name, double p, Generator& gen)
      : Cloneable<Derived>(name), p_(p), gen_(std::make_shared<Generator>(gen.next_u64())) {
    COHORT_CHECK(p >= 0.0 && p <= 1.0, "{}: p must be in [0, 1], got {}", name, p);
  }
  void on_copy(bool deep) override {
    if (deep) gen_ = std::make_shared<Generator>(*gen_);
  }

  double p_;
  std::shared_ptr<Generator> gen_;
};

class Dropout : public DropoutBase<Dropout> {
 public:
  Dropout(double p, Generator& gen) : DropoutBase("Dropout", p, gen) {}
  Tensor forward(const Tensor& x) override;
};

class Dropout2d : public DropoutBase<Dropout2d> {
 public:
  Dropout2d(double p, Generator& gen) : DropoutBase("Dropout2d", p, gen) {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace cohort::nn
