#include "cohort/cuda/runtime.h"

#include <array>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/device_memory.h"
#include "cohort/cuda/kernels.h"

namespace cohort::cuda {
namespace {

constexpr int kStreamsPerDevice = 4;
// The pinned pool's blocks belong to no device stream: every use is a copy
// that record_stream() marks, so reuse waits for that copy's event.
constexpr uint64_t kHostStreamId = ~uint64_t{0};

std::string version_text(int v) {
  if (v <= 0) return "";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

// Counted by the process Runtime (base/runtime.h) with the other caches.
class AllocatorResource final : public RuntimeResource {
 public:
  AllocatorResource(std::string name, CachingAllocator& allocator)
      : name_(std::move(name)), allocator_(allocator) {}
  std::string name() const override { return name_; }
  CacheStats stats() const override {
    DeviceMemoryStats s = allocator_.stats();
    CacheStats c;
    c.bytes = allocator_.cached_bytes();
    c.peak_bytes = s.peak_reserved;
    c.hits = s.cache_hits;
    c.misses = s.device_allocs;
    return c;
  }
  void release_cached() noexcept override {
    try {
      allocator_.empty_cache();
    } catch (...) {
      // A device error while freeing leaves the blocks cached; the next
      // allocation reports it.
    }
  }

 private:
  std::string name_;
  CachingAllocator& allocator_;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }

  int device_count() override {
    probe();
    return count_;
  }
  std::string unavailable_reason() override {
    probe();
    return reason_;
  }

  DeviceProperties properties(int index) override {
    cudaDeviceProp p{};
    COHORT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    DeviceProperties d;
    d.index = index;
    d.name = p.name;
    d.total_memory = p.totalGlobalMem;
    d.major = p.major;
    d.minor = p.minor;
    d.multiprocessors = p.multiProcessorCount;
    return d;
  }

  std::string driver_version() override {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) return "";
    return v == 0 ? std::string("none (no CUDA driver is installed)") : version_text(v);
  }
  std::string runtime_version() override {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    return version_text(v);
  }

  int current_device() override {
    int d = 0;
    COHORT_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }
  void set_device(int index) override { COHORT_CUDA_CHECK(cudaSetDevice(index)); }

  void* allocate(int index, size_t nbytes, const Stream& stream) override {
    return device(index).allocator->allocate(nbytes, stream);
  }
  void deallocate(int index, void* ptr) override { device(index).allocator->deallocate(ptr); }
  void record_stream(int index, void* ptr, const Stream& stream) override {
    device(index).allocator->record_stream(ptr, stream);
  }
  DeviceMemoryStats memory_stats(int index) override { return device(index).allocator->stats(); }
  void reset_peak_memory_stats(int index) override { device(index).allocator->reset_peak(); }
  void empty_cache() override {
    std::lock_guard lock(mu_);
    for (auto& [i, d] : devices_) d->allocator->empty_cache();
    if (pinned_) pinned_->empty_cache();
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
            const Stream& stream) override {
    cudaStream_t s = raw_stream(stream);
    COHORT_CUDA_CHECK(cudaSetDevice(stream.device.index()));
    if (!src_device.is_cpu() && !dst_device.is_cpu()) {
      if (src_device == dst_device) {
        COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, s));
      } else {
        COHORT_CUDA_CHECK(
            cudaMemcpyPeerAsync(dst, dst_device.index(), src, src_device.index(), nbytes, s));
      }
      return;
    }
    CachingAllocator& pool = pinned();
    const Stream host{kCPU, nullptr, kHostStreamId};
    void* staging = pool.allocate(nbytes, host);
    if (src_device.is_cpu()) {
      // The caller may reuse src at once: the bytes wait in pinned memory,
      // which the pool reuses only after this copy's event.
      std::memcpy(staging, src, nbytes);
      cudaError_t err = cudaMemcpyAsync(dst, staging, nbytes, cudaMemcpyHostToDevice, s);
      pool.record_stream(staging, stream);
      pool.deallocate(staging);
      if (err != cudaSuccess) throw_cuda_error(err, "cudaMemcpyAsync (host to device)");
      return;
    }
    cudaError_t err = cudaMemcpyAsync(staging, src, nbytes, cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess) {
      try {
        synchronize(record(stream), device_wait_timeout(), "copy from the device to the host");
      } catch (...) {
        pool.record_stream(staging, stream);
        pool.deallocate(staging);
        throw;
      }
      std::memcpy(dst, staging, nbytes);
    }
    pool.deallocate(staging);
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMemcpyAsync (device to host)");
  }

  void fill_bytes(void* dst, int value, size_t nbytes, const Stream& stream) override {
    COHORT_CUDA_CHECK(cudaSetDevice(stream.device.index()));
    COHORT_CUDA_CHECK(cudaMemsetAsync(dst, value, nbytes, raw_stream(stream)));
  }

  Stream default_stream(int index) override {
    return Stream{Device(DeviceType::kCUDA, index), nullptr, 0};
  }

  Stream new_stream(int index) override {
    PerDevice& d = device(index);
    std::lock_guard lock(mu_);
    size_t slot = d.next_stream++ % kStreamsPerDevice;
    if (d.streams[slot] == nullptr) {
      COHORT_CUDA_CHECK(cudaSetDevice(index));
      // Non-blocking: a side stream (copies, collectives) must not wait for
      // the legacy default stream's work, or nothing overlaps.
      COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&d.streams[slot], cudaStreamNonBlocking));
    }
    return Stream{Device(DeviceType::kCUDA, index), d.streams[slot], slot + 1};
  }

  Event record(const Stream& stream) override { return Event{stream.device, record_event(stream)}; }

  void wait(const Stream& stream, const Event& event) override {
    if (!event.valid()) return;
    COHORT_CUDA_CHECK(
        cudaStreamWaitEvent(raw_stream(stream), static_cast<cudaEvent_t>(event.handle.get()), 0));
  }

  bool query(const Event& event) override { return event_done(event.handle); }

  void synchronize(const Event& event, std::chrono::milliseconds timeout,
                   std::string_view what) override {
    // Polled rather than cudaEventSynchronize, which cannot time out: a hung
    // kernel or a collective whose peer died must not hang the host.
    auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(20);
    while (!event_done(event.handle)) {
      auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout) {
        throw TimeoutError(fmt::format(
            "{}: {} did not finish its work within {} s (a kernel that never ends, or a "
            "collective whose peer is gone; COHORT_DEVICE_TIMEOUT_S sets the limit)",
            what, event.device.str(),
            std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  struct PerDevice {
    std::unique_ptr<CudaDeviceMemory> memory;
    std::unique_ptr<CachingAllocator> allocator;
    std::array<cudaStream_t, kStreamsPerDevice> streams{};
    size_t next_stream = 0;
    int multiprocessors = 0;
  };

  PerDevice& device(int index) {
    std::lock_guard lock(mu_);
    auto it = devices_.find(index);
    if (it != devices_.end()) return *it->second;
    auto d = std::make_unique<PerDevice>();
    d->memory = std::make_unique<CudaDeviceMemory>(index);
    std::string name = fmt::format("cuda:{}", index);
    d->allocator = std::make_unique<CachingAllocator>(name, *d->memory);
    cudaDeviceGetAttribute(&d->multiprocessors, cudaDevAttrMultiProcessorCount, index);
    Runtime::process().attach(
        std::make_shared<AllocatorResource>(name + " allocator", *d->allocator));
    return *devices_.emplace(index, std::move(d)).first->second;
  }

  CachingAllocator& pinned() {
    std::lock_guard lock(mu_);
    if (!pinned_) {
      pinned_ = std::make_unique<CachingAllocator>("pinned host pool", pinned_memory_);
      Runtime::process().attach(std::make_shared<AllocatorResource>("cuda pinned", *pinned_));
    }
    return *pinned_;
  }

 private:
  void probe() {
    std::call_once(probed_, [this] {
      int n = 0;
      cudaError_t err = cudaGetDeviceCount(&n);
      if (err != cudaSuccess) {
        cudaGetLastError();
        count_ = 0;
        reason_ = fmt::format("cudaGetDeviceCount failed: {}{}", cuda_error_text(err),
                              err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
                                  ? " -- this machine has no usable NVIDIA GPU and driver"
                                  : "");
      } else if (n == 0) {
        reason_ = "the CUDA driver reports no devices";
      } else {
        count_ = n;
      }
    });
  }

  std::once_flag probed_;
  int count_ = 0;
  std::string reason_;
  std::mutex mu_;
  std::unordered_map<int, std::unique_ptr<PerDevice>> devices_;
  PinnedHostMemory pinned_memory_;
  std::unique_ptr<CachingAllocator> pinned_;
};

CudaRuntime& cuda_runtime() {
  // Never destroyed: tensors freed during static destruction still return
  // their blocks.
  static CudaRuntime* rt = new CudaRuntime();
  return *rt;
}

struct ThreadHandles {
  std::unordered_map<int, cublasLtHandle_t> cublaslt;
  std::unordered_map<int, cudnnHandle_t> cudnn;
  std::unordered_map<int, Tensor> workspace;
  // Handles are left to the driver's teardown at exit: destroying them after
  // the CUDA context is gone fails.
};
thread_local ThreadHandles t_handles;

}  // namespace

DeviceRuntime& runtime() { return cuda_runtime(); }

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_device_runtime(DeviceType::kCUDA, &cuda_runtime());
    register_tensor_kernels();
    register_pointwise_kernels();
    register_dense_kernels();
  });
}

cudaStream_t raw_stream(const Stream& stream) { return static_cast<cudaStream_t>(stream.handle); }

cudaStream_t current_cuda_stream(Device device) {
  Stream s = current_stream(device);
  int current = -1;
  COHORT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != s.device.index()) COHORT_CUDA_CHECK(cudaSetDevice(s.device.index()));
  return raw_stream(s);
}

cublasLtHandle_t cublaslt_handle(Device device) {
  device = resolve_device(device);
  auto& h = t_handles.cublaslt[device.index()];
  if (h == nullptr) {
    COHORT_CUDA_CHECK(cudaSetDevice(device.index()));
    COHORT_CUBLAS_CHECK(cublasLtCreate(&h));
  }
  return h;
}

cudnnHandle_t cudnn_handle(Device device) {
  cudaStream_t stream = current_cuda_stream(device);
  auto& h = t_handles.cudnn[resolve_device(device).index()];
  if (h == nullptr) COHORT_CUDNN_CHECK(cudnnCreate(&h));
  COHORT_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

void* workspace(Device device, size_t bytes) {
  device = resolve_device(device);
  Tensor& buffer = t_handles.workspace[device.index()];
  if (!buffer.defined() || buffer.nbytes() < bytes) {
    buffer = Tensor();  // back to the cache first, so a grown buffer can reuse it
    buffer = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kUInt8, device);
  }
  return buffer.device_data();
}

int multiprocessors(Device device) {
  return cuda_runtime().device(resolve_device(device).index()).multiprocessors;
}

}  // namespace cohort::cuda
