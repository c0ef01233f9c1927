#include "cohort/cuda/runtime.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/device_memory.h"
#include "cohort/cuda/kernels.h"
#include "cohort/cuda/runtime_impl.h"

namespace cohort::cuda {
namespace {

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

}  // namespace

CudaRuntime::CudaRuntime(CudaApi& api, bool attach_caches)
    : api_(api), attach_caches_(attach_caches), pinned_memory_(api) {}

int CudaRuntime::device_count() {
  probe();
  return count_;
}

std::string CudaRuntime::unavailable_reason() {
  probe();
  return reason_;
}

DeviceProperties CudaRuntime::properties(int index) {
  cudaDeviceProp p{};
  COHORT_CUDA_CHECK(api_.get_device_properties(&p, index));
  DeviceProperties d;
  d.index = index;
  d.name = p.name;
  d.total_memory = p.totalGlobalMem;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  return d;
}

std::string CudaRuntime::driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return "";
  return v == 0 ? std::string("none (no CUDA driver is installed)") : version_text(v);
}

std::string CudaRuntime::runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return version_text(v);
}

int CudaRuntime::current_device() {
  int d = 0;
  COHORT_CUDA_CHECK(api_.get_device(&d));
  return d;
}

void CudaRuntime::set_device(int index) { COHORT_CUDA_CHECK(api_.set_device(index)); }

void* CudaRuntime::allocate(int index, size_t nbytes, const Stream& stream) {
  return device(index).allocator->allocate(nbytes, stream);
}
void CudaRuntime::deallocate(int index, void* ptr) { device(index).allocator->deallocate(ptr); }
void CudaRuntime::record_stream(int index, void* ptr, const Stream& stream) {
  device(index).allocator->record_stream(ptr, stream);
}
DeviceMemoryStats CudaRuntime::memory_stats(int index) { return device(index).allocator->stats(); }
void CudaRuntime::reset_peak_memory_stats(int index) { device(index).allocator->reset_peak(); }

void CudaRuntime::empty_cache() {
  std::lock_guard lock(mu_);
  for (auto& [i, d] : devices_) d->allocator->empty_cache();
  if (pinned_) pinned_->empty_cache();
}

void CudaRuntime::copy(void* dst, Device dst_device, const void* src, Device src_device,
                       size_t nbytes, const Stream& stream) {
  cudaStream_t s = raw_stream(stream);
  // The pinned staging block too is allocated with the stream's device current.
  DeviceGuard guard(api_, stream.device.index());
  if (!src_device.is_cpu() && !dst_device.is_cpu()) {
    if (src_device == dst_device) {
      COHORT_CUDA_CHECK(api_.memcpy_async(dst, src, nbytes, cudaMemcpyDeviceToDevice, s));
    } else {
      COHORT_CUDA_CHECK(
          api_.memcpy_peer_async(dst, dst_device.index(), src, src_device.index(), nbytes, s));
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
    cudaError_t err = api_.memcpy_async(dst, staging, nbytes, cudaMemcpyHostToDevice, s);
    pool.record_stream(staging, stream);
    pool.deallocate(staging);
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMemcpyAsync (host to device)");
    return;
  }
  cudaError_t err = api_.memcpy_async(staging, src, nbytes, cudaMemcpyDeviceToHost, s);
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

void CudaRuntime::fill_bytes(void* dst, int value, size_t nbytes, const Stream& stream) {
  DeviceGuard guard(api_, stream.device.index());
  COHORT_CUDA_CHECK(api_.memset_async(dst, value, nbytes, raw_stream(stream)));
}

Stream CudaRuntime::default_stream(int index) {
  return Stream{Device(DeviceType::kCUDA, index), nullptr, 0};
}

CudaRuntime::SideStream CudaRuntime::create_stream(int index, PerDevice& d) {
  DeviceGuard guard(api_, index);
  SideStream s;
  // Non-blocking: a side stream (copies, collectives) must not wait for the
  // legacy default stream's work, or nothing overlaps.
  COHORT_CUDA_CHECK(api_.stream_create(&s.handle, cudaStreamNonBlocking));
  s.id = d.next_id++;
  d.handles[s.id] = s.handle;
  return s;
}

Stream CudaRuntime::side_stream(int index, StreamPurpose purpose) {
  PerDevice& d = device(index);
  std::lock_guard lock(mu_);
  SideStream s;
  switch (purpose) {
    case StreamPurpose::kUser: {
      SideStream& slot = d.user[d.next_user++ % kUserStreams];
      if (slot.handle == nullptr) slot = create_stream(index, d);
      s = slot;
      break;
    }
    case StreamPurpose::kDataLoader:
      if (d.data_loader.handle == nullptr) d.data_loader = create_stream(index, d);
      s = d.data_loader;
      break;
    case StreamPurpose::kStagedCopies:
      if (d.staged.handle == nullptr) d.staged = create_stream(index, d);
      s = d.staged;
      break;
    case StreamPurpose::kCollectives:
      if (!d.free_collectives.empty()) {
        s = d.free_collectives.back();
        d.free_collectives.pop_back();
      } else {
        s = create_stream(index, d);
        d.collective_ids.push_back(s.id);
      }
      break;
  }
  return Stream{Device(DeviceType::kCUDA, index), s.handle, s.id};
}

void CudaRuntime::release_stream(const Stream& stream) {
  PerDevice& d = device(stream.device.index());
  std::lock_guard lock(mu_);
  if (std::find(d.collective_ids.begin(), d.collective_ids.end(), stream.id) ==
      d.collective_ids.end())
    return;  // shared by its purpose's users
  for (const SideStream& s : d.free_collectives)
    if (s.id == stream.id) return;  // given back already
  d.free_collectives.push_back(SideStream{raw_stream(stream), stream.id});
}

Event CudaRuntime::record(const Stream& stream) {
  return Event{stream.device, record_event(api_, stream)};
}

void CudaRuntime::wait(const Stream& stream, const Event& event) {
  if (!event.valid()) return;
  // The null handle is the default stream of the current device: without
  // the stream's device selected, another device's stream would wait.
  DeviceGuard guard(api_, stream.device.index());
  COHORT_CUDA_CHECK(api_.stream_wait_event(raw_stream(stream), event_handle(event.handle), 0));
}

bool CudaRuntime::query(const Event& event) { return event_done(api_, event.handle); }

void CudaRuntime::synchronize(const Event& event, std::chrono::milliseconds timeout,
                              std::string_view what) {
  // Polled rather than cudaEventSynchronize, which cannot time out: a hung
  // kernel or a collective whose peer died must not hang the host.
  auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(20);
  while (!event_done(api_, event.handle)) {
    auto waited = std::chrono::steady_clock::now() - start;
    if (waited > timeout) {
      throw TimeoutError(
          fmt::format("{}: {} did not finish its work within {} s (a kernel that never ends, or a "
                      "collective whose peer is gone; COHORT_DEVICE_TIMEOUT_S sets the limit)",
                      what, event.device.str(),
                      std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

int CudaRuntime::multiprocessors(int index) { return device(index).multiprocessors; }

CudaRuntime::PerDevice& CudaRuntime::device(int index) {
  std::lock_guard lock(mu_);
  auto it = devices_.find(index);
  if (it != devices_.end()) return *it->second;
  auto d = std::make_unique<PerDevice>();
  d->memory = std::make_unique<CudaDeviceMemory>(api_, index);
  std::string name = fmt::format("cuda:{}", index);
  d->allocator = std::make_unique<CachingAllocator>(name, *d->memory);
  api_.device_get_attribute(&d->multiprocessors, cudaDevAttrMultiProcessorCount, index);
  if (attach_caches_) {
    Runtime::process().attach(
        std::make_shared<AllocatorResource>(name + " allocator", *d->allocator));
  }
  return *devices_.emplace(index, std::move(d)).first->second;
}

CachingAllocator& CudaRuntime::pinned() {
  std::lock_guard lock(mu_);
  if (!pinned_) {
    pinned_ = std::make_unique<CachingAllocator>("pinned host pool", pinned_memory_);
    if (attach_caches_)
      Runtime::process().attach(std::make_shared<AllocatorResource>("cuda pinned", *pinned_));
  }
  return *pinned_;
}

void CudaRuntime::probe() {
  std::call_once(probed_, [this] {
    int n = 0;
    cudaError_t err = api_.get_device_count(&n);
    if (err != cudaSuccess) {
      api_.get_last_error();
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

namespace {

CudaRuntime& cuda_runtime() {
  // Never destroyed: tensors freed during static destruction still return
  // their blocks.
  static CudaRuntime* rt = new CudaRuntime(real_cuda_api(), true);
  return *rt;
}

struct ThreadHandles {
  std::unordered_map<int, cublasLtHandle_t> cublaslt;
  std::unordered_map<int, cudnnHandle_t> cudnn;
  // Per device and stream: work on two streams of one thread may overlap.
  std::map<std::pair<int, uint64_t>, Tensor> workspace;
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

void* workspace(const Stream& stream, size_t bytes) {
  Tensor& buffer = t_handles.workspace[{stream.device.index(), stream.id}];
  if (!buffer.defined() || buffer.nbytes() < bytes) {
    buffer = Tensor();  // back to the cache first, so a grown buffer can reuse it
    // Allocated for the stream it serves, so the allocator orders its reuse
    // after that stream's work.
    StreamGuard on(stream);
    buffer = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kUInt8, stream.device);
  }
  return buffer.device_data();
}

void* workspace(Device device, size_t bytes) {
  return workspace(current_stream(resolve_device(device)), bytes);
}

int multiprocessors(Device device) {
  return cuda_runtime().multiprocessors(resolve_device(device).index());
}

}  // namespace cohort::cuda
