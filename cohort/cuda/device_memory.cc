#include "cohort/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <memory>

#include "cohort/base/error.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {

std::shared_ptr<void> record_event(CudaApi& api, const Stream& stream) {
  const int device = stream.device.index();
  DeviceGuard guard(api, device);
  auto e = std::make_unique<CudaEvent>();
  e->device = device;
  COHORT_CUDA_CHECK(api.event_create(&e->event, cudaEventDisableTiming));
  cudaError_t err = api.event_record(e->event, raw_stream(stream));
  if (err != cudaSuccess) {
    api.event_destroy(e->event);
    throw_cuda_error(err, "cudaEventRecord");
  }
  // The last copy may go on any thread (a watchdog's): destroyed on its
  // device, so that thread makes no context elsewhere.
  return std::shared_ptr<void>(e.release(), [&api](void* p) {
    std::unique_ptr<CudaEvent> e(static_cast<CudaEvent*>(p));
    try {
      DeviceGuard g(api, e->device);
      api.event_destroy(e->event);
    } catch (...) {
      // The device is gone (teardown): the driver frees the event with it.
    }
  });
}

cudaEvent_t event_handle(const std::shared_ptr<void>& event) {
  return event ? static_cast<const CudaEvent*>(event.get())->event : nullptr;
}

bool event_done(CudaApi& api, const std::shared_ptr<void>& event) {
  if (!event) return true;
  const auto* e = static_cast<const CudaEvent*>(event.get());
  DeviceGuard guard(api, e->device);
  cudaError_t err = api.event_query(e->event);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  throw_cuda_error(err, "cudaEventQuery");
}

void* CudaDeviceMemory::raw_alloc(size_t nbytes) {
  DeviceGuard guard(api_, device_);
  void* p = nullptr;
  cudaError_t err = api_.malloc(&p, nbytes);
  if (err == cudaErrorMemoryAllocation) {
    api_.get_last_error();  // clears the sticky-free error so later calls do not see it
    return nullptr;
  }
  if (err != cudaSuccess) throw_cuda_error(err, fmt::format("cudaMalloc({} bytes)", nbytes));
  return p;
}

void CudaDeviceMemory::raw_free(void* ptr) noexcept {
  try {
    DeviceGuard guard(api_, device_);
    api_.free(ptr);
  } catch (...) {
    // The device cannot be selected any more (teardown): its memory goes with it.
  }
}

std::string CudaDeviceMemory::describe() {
  DeviceGuard guard(api_, device_);
  size_t free_bytes = 0, total = 0;
  cudaError_t err = api_.mem_get_info(&free_bytes, &total);
  if (err != cudaSuccess) return cuda_error_text(err);
  return fmt::format("{:.1f} MiB free of {:.1f} MiB", free_bytes / 1048576.0, total / 1048576.0);
}

std::shared_ptr<void> CudaDeviceMemory::record(const Stream& stream) {
  return record_event(api_, stream);
}
bool CudaDeviceMemory::done(const std::shared_ptr<void>& event) { return event_done(api_, event); }

// Page-locked memory belongs to no device; it is allocated on the device of
// the copy that needs it (the caller selected it) and freed there too.
void* PinnedHostMemory::raw_alloc(size_t nbytes) {
  void* p = nullptr;
  cudaError_t err = api_.host_alloc(&p, nbytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    api_.get_last_error();
    return nullptr;
  }
  if (err != cudaSuccess) throw_cuda_error(err, fmt::format("cudaHostAlloc({} bytes)", nbytes));
  int device = 0;
  if (api_.get_device(&device) == cudaSuccess) home_device_.store(device);
  return p;
}

void PinnedHostMemory::raw_free(void* ptr) noexcept {
  try {
    DeviceGuard guard(api_, home_device_.load());
    api_.free_host(ptr);
  } catch (...) {
    // Teardown: the driver releases it with the process.
  }
}

std::string PinnedHostMemory::describe() { return "page-locked host memory is exhausted"; }

std::shared_ptr<void> PinnedHostMemory::record(const Stream& stream) {
  return record_event(api_, stream);
}
bool PinnedHostMemory::done(const std::shared_ptr<void>& event) { return event_done(api_, event); }

}  // namespace cohort::cuda
