// Internal to the conv2d kernels: scratch memory for the batch-16 kernels
// (see conv2d_layout.h), shared by every kernel path.
// Thread safety: a ScratchLease belongs to one call; leases may be taken and
// returned from any thread at once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace cohort::kernels::detail {

constexpr int64_t kLanes = 16;  // samples per batch-16 element

// One cache-line-aligned element of 16 floats; std::vector<Vec16> gives
// aligned storage without manual allocation.
struct alignas(64) Vec16 {
  float v[kLanes];
};

// Grows `buf` to at least `vecs` vectors (never shrinks; contents are not
// preserved) and returns its data as floats.
float* ensure_vecs(std::vector<Vec16>& buf, int64_t vecs);

// Scratch buffers for one kernel call, leased from a process-wide pool and
// returned when the lease ends, so that steady-state training reuses warm
// memory instead of faulting in fresh pages every step, whichever threads the
// calls come from. Concurrent (or nested) leases get different buffers; the
// pool grows to the largest number of leases ever held at once.
class ScratchLease {
 public:
  static constexpr int kBuffers = 4;
  ScratchLease();
  ~ScratchLease();
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  // Buffer i (< kBuffers), grown to at least `floats`, 64-byte aligned.
  float* get(int i, int64_t floats);

  struct Buffers {
    std::vector<Vec16> buf[kBuffers];
  };

 private:
  std::unique_ptr<Buffers> s_;
};

}  // namespace cohort::kernels::detail
