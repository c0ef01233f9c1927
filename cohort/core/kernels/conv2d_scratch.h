// Internal to the conv2d kernels: scratch memory for the batch-16 kernels
// (see conv2d_layout.h), shared by every kernel path.
// Thread safety: a ScratchLease belongs to one call; leases may be taken and
// returned from any thread at once.
#pragma once

#include <cstdint>
#include <memory>

#include "cohort/base/caches.h"

namespace cohort::kernels::detail {

constexpr int64_t kLanes = 16;  // samples per batch-16 element

// Scratch buffers for one kernel call, leased from the process runtime's
// kernel_scratch pool (base/runtime.h) and given back when the lease ends, so
// that steady-state training reuses warm memory instead of faulting in fresh
// pages every step, whichever threads the calls come from. Concurrent (or
// nested) leases get different buffers; the pool keeps what its limit
// (RuntimeOptions::kernel_scratch_bytes) allows.
class ScratchLease {
 public:
  static constexpr int kBuffers = ScratchPool::kBuffers;
  ScratchLease();
  ~ScratchLease();
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  // Buffer i (< kBuffers), grown to at least `floats` rounded up to whole
  // batch-16 elements, 64-byte aligned; contents are not kept when it grows.
  float* get(int i, int64_t floats);

 private:
  std::unique_ptr<ScratchPool::Set> s_;
};

}  // namespace cohort::kernels::detail
