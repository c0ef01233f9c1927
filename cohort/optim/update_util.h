// Internal helper of the optimizers: contiguous float views of a parameter
// and its gradient for the fused update loops, copying back when the
// parameter itself is not contiguous. Not part of the public API.
#pragma once

#include <cstdint>

#include "cohort/core/tensor.h"

namespace cohort::optim {

// Elements per parallel_for chunk of an update loop: these loops are memory
// bound, so only tensors of 1 MiB and more are worth splitting across threads.
inline constexpr int64_t kUpdateGrain = 1 << 18;

class DenseUpdate {
 public:
  DenseUpdate(const Tensor& param, const Tensor& grad, const char* optimizer);
  template <typename T>
  T* param() const {
    return work_.data_ptr<T>();
  }
  template <typename T>
  const T* grad() const {
    return grad_.data_ptr<T>();
  }
  // Writes the result back when work_ is a copy.
  void finish();

 private:
  Tensor param_;
  Tensor work_;
  Tensor grad_;
};

}  // namespace cohort::optim
