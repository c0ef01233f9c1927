// Stateless activation modules (torch.nn.ReLU, GELU, Tanh, Sigmoid, Softmax,
// LogSoftmax): forward applies the op of cohort/autograd/ops.h to any shape.
// Thread safety: safe to share between threads.
#pragma once

#include "cohort/nn/module.h"

namespace cohort::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  ReLU() : Cloneable("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

// The exact erf form (PyTorch's default approximate='none').
class GELU : public Cloneable<GELU> {
 public:
  GELU() : Cloneable("GELU") {}
  Tensor forward(const Tensor& x) override { return gelu(x); }
};

class Tanh : public Cloneable<Tanh> {
 public:
  Tanh() : Cloneable("Tanh") {}
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  Sigmoid() : Cloneable("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

class Softmax : public Cloneable<Softmax> {
 public:
  explicit Softmax(int64_t dim) : Cloneable("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("dim={}", dim_); }

 private:
  int64_t dim_;
};

class LogSoftmax : public Cloneable<LogSoftmax> {
 public:
  explicit LogSoftmax(int64_t dim) : Cloneable("LogSoftmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("dim={}", dim_); }

 private:
  int64_t dim_;
};

}  // namespace cohort::nn
