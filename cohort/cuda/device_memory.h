// The CUDA sides of core's CachingAllocator (core/caching_allocator.h):
// device memory from cudaMalloc, and page-locked host memory from
// cudaHostAlloc for the pinned staging pool. Events for cross-stream reuse
// are CUDA events.
// Thread safety: stateless but for the device index; any thread.
#pragma once

#include "cohort/core/caching_allocator.h"

namespace cohort::cuda {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}
  void* raw_alloc(size_t nbytes) override;
  void raw_free(void* ptr) noexcept override;
  std::string describe() override;
  std::shared_ptr<void> record(const Stream& stream) override;
  bool done(const std::shared_ptr<void>& event) override;

 private:
  int device_;
};

class PinnedHostMemory final : public DeviceMemory {
 public:
  void* raw_alloc(size_t nbytes) override;
  void raw_free(void* ptr) noexcept override;
  std::string describe() override;
  std::shared_ptr<void> record(const Stream& stream) override;
  bool done(const std::shared_ptr<void>& event) override;
};

// A CUDA event recorded on `stream` (timing disabled), destroyed with the
// last copy of the handle.
std::shared_ptr<void> record_event(const Stream& stream);
bool event_done(const std::shared_ptr<void>& event);

}  // namespace cohort::cuda
