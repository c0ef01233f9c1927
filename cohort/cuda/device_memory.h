// The CUDA sides of core's CachingAllocator (core/caching_allocator.h):
// device memory from cudaMalloc, and page-locked host memory from
// cudaHostAlloc for the pinned staging pool. Events for cross-stream reuse
// are CUDA events. Every call goes through a CudaApi (cuda_api.h) with the
// device of the memory, stream or event selected (DeviceGuard).
// Thread safety: stateless but for the device index; any thread.
#pragma once

#include <atomic>

#include "cohort/core/caching_allocator.h"
#include "cohort/cuda/cuda_api.h"

namespace cohort::cuda {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  CudaDeviceMemory(CudaApi& api, int device) : api_(api), device_(device) {}
  void* raw_alloc(size_t nbytes) override;
  void raw_free(void* ptr) noexcept override;
  std::string describe() override;
  std::shared_ptr<void> record(const Stream& stream) override;
  bool done(const std::shared_ptr<void>& event) override;

 private:
  CudaApi& api_;
  int device_;
};

class PinnedHostMemory final : public DeviceMemory {
 public:
  explicit PinnedHostMemory(CudaApi& api) : api_(api) {}
  void* raw_alloc(size_t nbytes) override;
  void raw_free(void* ptr) noexcept override;
  std::string describe() override;
  std::shared_ptr<void> record(const Stream& stream) override;
  bool done(const std::shared_ptr<void>& event) override;

 private:
  CudaApi& api_;
  std::atomic<int> home_device_{0};  // where the blocks were allocated
};

// A CUDA event of `device`: what the handles of record_event (and so of
// core's Event) point to.
struct CudaEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
};

// A CUDA event recorded on `stream` (timing disabled), destroyed with the
// last copy of the handle, on the stream's device.
std::shared_ptr<void> record_event(CudaApi& api, const Stream& stream);
cudaEvent_t event_handle(const std::shared_ptr<void>& event);
// Whether the event completed, queried with its device current: a query
// from a thread on another device would create a context there.
bool event_done(CudaApi& api, const std::shared_ptr<void>& event);

}  // namespace cohort::cuda
