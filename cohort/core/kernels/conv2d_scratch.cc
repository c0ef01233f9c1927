#include "cohort/core/kernels/conv2d_scratch.h"

#include "cohort/base/runtime.h"

namespace cohort::kernels::detail {

ScratchLease::ScratchLease() : s_(Runtime::process().kernel_scratch().acquire()) {}

ScratchLease::~ScratchLease() { Runtime::process().kernel_scratch().give_back(std::move(s_)); }

float* ScratchLease::get(int i, int64_t floats) {
  const int64_t vecs = (floats + kLanes - 1) / kLanes;
  return static_cast<float*>(s_->buffers[static_cast<size_t>(i)].reserve(
      static_cast<size_t>(vecs * kLanes) * sizeof(float)));
}

}  // namespace cohort::kernels::detail
