#include "cohort/cuda/cuda_api.h"

#include <cudaTypedefs.h>

#include <mutex>

#include "cohort/base/error.h"
#include "cohort/cuda/check.h"

namespace cohort::cuda {
namespace {

// The driver's primary-context query, reached through the runtime (linking
// libcuda would make every program need a driver to start).
struct PrimaryContextQuery {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDevicePrimaryCtxGetState_v7000 get_state = nullptr;
};

const PrimaryContextQuery& primary_context_query() {
  static PrimaryContextQuery q;
  static std::once_flag once;
  std::call_once(once, [] {
    void* get = nullptr;
    void* state = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 2000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess ||
        cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 7000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return;
    }
    q.device_get = reinterpret_cast<PFN_cuDeviceGet_v2000>(get);
    q.get_state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(state);
  });
  return q;
}

class RealCudaApi final : public CudaApi {
 public:
  cudaError_t get_device_count(int* count) override { return cudaGetDeviceCount(count); }
  cudaError_t get_device(int* device) override { return cudaGetDevice(device); }
  cudaError_t set_device(int device) override { return cudaSetDevice(device); }
  bool has_context(int device) override {
    const PrimaryContextQuery& q = primary_context_query();
    if (q.get_state == nullptr) return false;
    CUdevice dev = 0;
    unsigned flags = 0;
    int active = 0;
    if (q.device_get(&dev, device) != CUDA_SUCCESS) return false;
    return q.get_state(dev, &flags, &active) == CUDA_SUCCESS && active != 0;
  }
  cudaError_t device_get_attribute(int* value, cudaDeviceAttr attr, int device) override {
    return cudaDeviceGetAttribute(value, attr, device);
  }
  cudaError_t get_device_properties(cudaDeviceProp* prop, int device) override {
    return cudaGetDeviceProperties(prop, device);
  }
  cudaError_t get_last_error() override { return cudaGetLastError(); }

  cudaError_t stream_create(cudaStream_t* stream, unsigned flags) override {
    return cudaStreamCreateWithFlags(stream, flags);
  }
  cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags) override {
    return cudaStreamWaitEvent(stream, event, flags);
  }
  cudaError_t event_create(cudaEvent_t* event, unsigned flags) override {
    return cudaEventCreateWithFlags(event, flags);
  }
  cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) override {
    return cudaEventRecord(event, stream);
  }
  cudaError_t event_query(cudaEvent_t event) override { return cudaEventQuery(event); }
  cudaError_t event_destroy(cudaEvent_t event) override { return cudaEventDestroy(event); }

  cudaError_t malloc(void** ptr, size_t bytes) override { return cudaMalloc(ptr, bytes); }
  cudaError_t free(void* ptr) override { return cudaFree(ptr); }
  cudaError_t mem_get_info(size_t* free_bytes, size_t* total) override {
    return cudaMemGetInfo(free_bytes, total);
  }
  cudaError_t host_alloc(void** ptr, size_t bytes, unsigned flags) override {
    return cudaHostAlloc(ptr, bytes, flags);
  }
  cudaError_t free_host(void* ptr) override { return cudaFreeHost(ptr); }
  cudaError_t memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                           cudaStream_t stream) override {
    return cudaMemcpyAsync(dst, src, bytes, kind, stream);
  }
  cudaError_t memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream) override {
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream);
  }
  cudaError_t memset_async(void* dst, int value, size_t bytes, cudaStream_t stream) override {
    return cudaMemsetAsync(dst, value, bytes, stream);
  }
};

}  // namespace

CudaApi& real_cuda_api() {
  static RealCudaApi* api = new RealCudaApi();
  return *api;
}

DeviceGuard::DeviceGuard(CudaApi& api, int device) : api_(api) {
  int current = -1;
  COHORT_CUDA_CHECK(api_.get_device(&current));
  if (current == device) return;
  cudaError_t err = api_.set_device(device);
  if (err != cudaSuccess) {
    throw Error(fmt::format("cuda:{}: selecting the device (cudaSetDevice) failed: {}", device,
                            cuda_error_text(err)));
  }
  if (api_.has_context(current)) previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  // Best effort: a destructor cannot report, and the next call that needs
  // the device selects it again.
  if (previous_ >= 0) api_.set_device(previous_);
}

}  // namespace cohort::cuda
