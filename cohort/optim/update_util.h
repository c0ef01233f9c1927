// Internal helper of the optimizers: contiguous float views of a parameter
// and its gradient for the fused update loops, copying back when the
// parameter itself is not contiguous. Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

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

// The update loops of one optimizer step, one per parameter, run as one
// range of elements split over the thread budget: a model's parameters are
// mostly under kUpdateGrain each (a GPT's are all), and updated one after
// another each would run on one thread while the others wait. The loops are
// elementwise, so the bits do not depend on where the range is cut.
class UpdateBatch {
 public:
  // loop(b, e) updates elements [b, e) of a tensor of n elements.
  void add(int64_t n, std::function<void(int64_t, int64_t)> loop);
  // Runs every loop over all of its elements, then forgets them.
  void run();

 private:
  std::vector<int64_t> ends_;  // running totals of n
  std::vector<std::function<void(int64_t, int64_t)>> loops_;
};

}  // namespace cohort::optim
