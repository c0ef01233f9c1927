#include "cohort/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "cohort/base/error.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    COHORT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) COHORT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace

std::shared_ptr<void> record_event(const Stream& stream) {
  DeviceScope scope(stream.device.index());
  cudaEvent_t event = nullptr;
  COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(event, raw_stream(stream));
  if (err != cudaSuccess) {
    cudaEventDestroy(event);
    throw_cuda_error(err, "cudaEventRecord");
  }
  return std::shared_ptr<void>(event,
                               [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

bool event_done(const std::shared_ptr<void>& event) {
  if (!event) return true;
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event.get()));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  throw_cuda_error(err, "cudaEventQuery");
}

void* CudaDeviceMemory::raw_alloc(size_t nbytes) {
  DeviceScope scope(device_);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, nbytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the sticky-free error so later calls do not see it
    return nullptr;
  }
  if (err != cudaSuccess) throw_cuda_error(err, fmt::format("cudaMalloc({} bytes)", nbytes));
  return p;
}

void CudaDeviceMemory::raw_free(void* ptr) noexcept {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaFree(ptr);
  cudaSetDevice(previous);
}

std::string CudaDeviceMemory::describe() {
  DeviceScope scope(device_);
  size_t free_bytes = 0, total = 0;
  cudaError_t err = cudaMemGetInfo(&free_bytes, &total);
  if (err != cudaSuccess) return cuda_error_text(err);
  return fmt::format("{:.1f} MiB free of {:.1f} MiB", free_bytes / 1048576.0, total / 1048576.0);
}

std::shared_ptr<void> CudaDeviceMemory::record(const Stream& stream) {
  return record_event(stream);
}
bool CudaDeviceMemory::done(const std::shared_ptr<void>& event) { return event_done(event); }

void* PinnedHostMemory::raw_alloc(size_t nbytes) {
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  if (err != cudaSuccess) throw_cuda_error(err, fmt::format("cudaHostAlloc({} bytes)", nbytes));
  return p;
}

void PinnedHostMemory::raw_free(void* ptr) noexcept { cudaFreeHost(ptr); }

std::string PinnedHostMemory::describe() { return "page-locked host memory is exhausted"; }

std::shared_ptr<void> PinnedHostMemory::record(const Stream& stream) {
  return record_event(stream);
}
bool PinnedHostMemory::done(const std::shared_ptr<void>& event) { return event_done(event); }

}  // namespace cohort::cuda
