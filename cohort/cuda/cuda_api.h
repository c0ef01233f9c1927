// CudaApi: the CUDA runtime calls that the device runtime (runtime.cc,
// device_memory.cc) makes -- device selection, streams, events, memory and
// copies -- as an interface, so that a test can stand in for CUDA with a
// fake of several devices (fake_cuda_api_testing.h) and check, on a machine
// without a GPU, which device was current for each call. real_cuda_api()
// forwards to CUDA. Kernels, cuBLASLt and cuDNN do not go through it: they
// only run on a GPU.
// Thread safety: the real one is stateless; any thread.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace cohort::cuda {

class CudaApi {
 public:
  virtual ~CudaApi() = default;

  virtual cudaError_t get_device_count(int* count) = 0;
  virtual cudaError_t get_device(int* device) = 0;
  // Makes `device` current on the calling thread and, since CUDA 12, creates
  // its primary context if the process has none there yet.
  virtual cudaError_t set_device(int device) = 0;
  // Whether the process already has `device`'s primary context, so that
  // making it current costs no device memory (cuDevicePrimaryCtxGetState).
  // False when that cannot be known.
  virtual bool has_context(int device) = 0;
  virtual cudaError_t device_get_attribute(int* value, cudaDeviceAttr attr, int device) = 0;
  virtual cudaError_t get_device_properties(cudaDeviceProp* prop, int device) = 0;
  virtual cudaError_t get_last_error() = 0;

  virtual cudaError_t stream_create(cudaStream_t* stream, unsigned flags) = 0;
  virtual cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags) = 0;
  virtual cudaError_t event_create(cudaEvent_t* event, unsigned flags) = 0;
  virtual cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) = 0;
  virtual cudaError_t event_query(cudaEvent_t event) = 0;
  virtual cudaError_t event_destroy(cudaEvent_t event) = 0;

  virtual cudaError_t malloc(void** ptr, size_t bytes) = 0;
  virtual cudaError_t free(void* ptr) = 0;
  virtual cudaError_t mem_get_info(size_t* free_bytes, size_t* total) = 0;
  virtual cudaError_t host_alloc(void** ptr, size_t bytes, unsigned flags) = 0;
  virtual cudaError_t free_host(void* ptr) = 0;
  virtual cudaError_t memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream) = 0;
  virtual cudaError_t memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                                        size_t bytes, cudaStream_t stream) = 0;
  virtual cudaError_t memset_async(void* dst, int value, size_t bytes, cudaStream_t stream) = 0;
};

// The process's CUDA runtime (never destroyed).
CudaApi& real_cuda_api();

// Makes `device` current on the calling thread for a scope, and then the
// previous device again -- unless the process has no context on that one:
// making it current would create one (about 0.5 GB of its memory) for a
// thread that never worked there, as PyTorch's MaybeSetDevice avoids. The
// thread then stays on `device`, which is where it worked.
// Throws cohort::Error naming the device when it cannot be selected.
class DeviceGuard {
 public:
  DeviceGuard(CudaApi& api, int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  CudaApi& api_;
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace cohort::cuda
