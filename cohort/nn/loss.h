// Loss modules (torch.nn.MSELoss, NLLLoss, CrossEntropyLoss): forward(input,
// target) returns a 0-d loss for Reduction::kMean/kSum and per-element /
// per-sample losses for kNone.
//   MSELoss:          input and target of the same shape.
//   NLLLoss:          input [N, C] log-probabilities, target int64 [N].
//   CrossEntropyLoss: input [N, C] logits, target int64 [N].
// Targets equal to ignore_index (default -100) are skipped by NLL and CE.
// Stateless; safe to share between threads.
#pragma once

#include "cohort/nn/module.h"

namespace cohort::nn {

class MSELoss : public Cloneable<MSELoss> {
 public:
  explicit MSELoss(Reduction reduction = Reduction::kMean)
      : Cloneable("MSELoss"), reduction_(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
};

class NLLLoss : public Cloneable<NLLLoss> {
 public:
  explicit NLLLoss(Reduction reduction = Reduction::kMean, int64_t ignore_index = -100)
      : Cloneable("NLLLoss"), reduction_(reduction), ignore_index_(ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  int64_t ignore_index_;
};

class CrossEntropyLoss : public Cloneable<CrossEntropyLoss> {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::kMean, int64_t ignore_index = -100)
      : Cloneable("CrossEntropyLoss"), reduction_(reduction), ignore_index_(ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  int64_t ignore_index_;
};

// "mean", "sum", "none".
std::string reduction_name(Reduction r);

}  // namespace cohort::nn
