// FakeCudaApi: a CudaApi (cuda_api.h) of `devices` fake GPUs for machines
// without one, for checking which device each thread has current when the
// runtime (runtime_impl.h's CudaRuntime over this fake) calls CUDA. It keeps
// CUDA's rules that matter here: each thread's current device is 0 until it
// sets one; the null stream is the current device's default stream;
// cudaSetDevice and every call that needs a context create the current
// device's context if the process has none (CUDA 12 and later). It records
// every call with the thread's current device, each thread's first context,
// and every stream wait. A cross-device misuse -- an operation on a stream,
// event or allocation of one device issued while another is current, or an
// event recorded on another device's stream -- is refused
// (cudaErrorInvalidResourceHandle) and recorded in misuses(). CUDA itself
// allows some of these (a wait or a query across devices) but then makes a
// context on the current device; the runtime promises to select the device
// first, so the fake holds it to that.
// Memory is host memory; copies and fills run at once; events complete at
// once. Thread safety: any thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cohort/cuda/cuda_api.h"

namespace cohort::cuda::testing {

class FakeCudaApi final : public CudaApi {
 public:
  struct Call {
    int thread = 0;  // threads numbered in the order of their first call
    std::string name;
    int current = 0;  // the thread's current device during the call
  };
  struct Wait {
    int stream_device = 0;
    uint64_t stream = 0;  // 0: that device's default stream
    int event_device = 0;
    int current = 0;
  };

  explicit FakeCudaApi(int devices) : devices_(devices) {}
  ~FakeCudaApi() override {
    for (void* p : live_) std::free(p);
  }

  // What was seen so far.
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<Wait> waits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_;
  }
  std::vector<std::string> misuses() const {
    std::lock_guard<std::mutex> lock(mu_);
    return misuses_;
  }
  // The devices with a context, and the calls that made them ("cuda:0 by
  // cudaEventQuery on thread 3").
  std::set<int> contexts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return contexts_;
  }
  std::vector<std::string> context_makers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return context_makers_;
  }
  // The calls made with `device` current, as "thread 2: cudaEventQuery".
  std::vector<std::string> calls_with_current(int device) const {
    std::vector<std::string> out;
    for (const Call& c : calls())
      if (c.current == device) out.push_back("thread " + std::to_string(c.thread) + ": " + c.name);
    return out;
  }
  int current_of_this_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return thread().current;
  }

  cudaError_t get_device_count(int* count) override {
    *count = devices_;
    return devices_ > 0 ? cudaSuccess : cudaErrorNoDevice;
  }
  cudaError_t get_device(int* device) override {
    std::lock_guard<std::mutex> lock(mu_);
    *device = thread().current;
    return cudaSuccess;
  }
  cudaError_t set_device(int device) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < 0 || device >= devices_) return cudaErrorInvalidDevice;
    thread().current = device;
    return context_call("cudaSetDevice");
  }
  bool has_context(int device) override {
    std::lock_guard<std::mutex> lock(mu_);
    return contexts_.count(device) > 0;
  }
  cudaError_t device_get_attribute(int* value, cudaDeviceAttr, int device) override {
    if (device < 0 || device >= devices_) return cudaErrorInvalidDevice;
    *value = 132;
    return cudaSuccess;
  }
  cudaError_t get_device_properties(cudaDeviceProp* prop, int device) override {
    if (device < 0 || device >= devices_) return cudaErrorInvalidDevice;
    *prop = cudaDeviceProp{};
    std::strncpy(prop->name, "fake", sizeof(prop->name) - 1);
    prop->totalGlobalMem = size_t{1} << 30;
    prop->major = 9;
    prop->multiProcessorCount = 132;
    return cudaSuccess;
  }
  cudaError_t get_last_error() override { return cudaSuccess; }

  cudaError_t stream_create(cudaStream_t* stream, unsigned) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = std::make_unique<FakeStream>(FakeStream{thread().current, ++next_stream_});
    *stream = reinterpret_cast<cudaStream_t>(s.get());
    streams_.push_back(std::move(s));
    return context_call("cudaStreamCreateWithFlags");
  }
  cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned) override {
    std::lock_guard<std::mutex> lock(mu_);
    const FakeStream s = resolve(stream);
    if (cudaError_t e = on_current(s.device, "cudaStreamWaitEvent (stream)"); e != cudaSuccess)
      return e;
    waits_.push_back(Wait{s.device, s.id, as_event(event)->device, thread().current});
    return context_call("cudaStreamWaitEvent");
  }
  cudaError_t event_create(cudaEvent_t* event, unsigned) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto e = std::make_unique<FakeEvent>(FakeEvent{thread().current});
    *event = reinterpret_cast<cudaEvent_t>(e.get());
    events_.push_back(std::move(e));
    return context_call("cudaEventCreateWithFlags");
  }
  cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    const FakeStream s = resolve(stream);
    if (cudaError_t e = on_current(s.device, "cudaEventRecord (stream)"); e != cudaSuccess)
      return e;
    if (as_event(event)->device != s.device)
      return misuse("cudaEventRecord: an event of cuda:" + std::to_string(as_event(event)->device) +
                    " on a stream of cuda:" + std::to_string(s.device));
    return context_call("cudaEventRecord");
  }
  cudaError_t event_query(cudaEvent_t event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaError_t e = on_current(as_event(event)->device, "cudaEventQuery"); e != cudaSuccess)
      return e;
    return context_call("cudaEventQuery");
  }
  cudaError_t event_destroy(cudaEvent_t event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaError_t e = on_current(as_event(event)->device, "cudaEventDestroy"); e != cudaSuccess)
      return e;
    return context_call("cudaEventDestroy");
  }

  cudaError_t malloc(void** ptr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    *ptr = std::malloc(bytes ? bytes : 1);
    live_.insert(*ptr);
    owner_[*ptr] = thread().current;
    return context_call("cudaMalloc");
  }
  cudaError_t free(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaError_t e = on_current(owner_[ptr], "cudaFree"); e != cudaSuccess) return e;
    live_.erase(ptr);
    std::free(ptr);
    return context_call("cudaFree");
  }
  cudaError_t mem_get_info(size_t* free_bytes, size_t* total) override {
    std::lock_guard<std::mutex> lock(mu_);
    *free_bytes = *total = size_t{1} << 30;
    return context_call("cudaMemGetInfo");
  }
  cudaError_t host_alloc(void** ptr, size_t bytes, unsigned) override {
    std::lock_guard<std::mutex> lock(mu_);
    *ptr = std::malloc(bytes ? bytes : 1);
    live_.insert(*ptr);
    return context_call("cudaHostAlloc");
  }
  cudaError_t free_host(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(ptr);
    std::free(ptr);
    return context_call("cudaFreeHost");
  }
  cudaError_t memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                           cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaError_t e = on_current(resolve(stream).device, "cudaMemcpyAsync"); e != cudaSuccess)
      return e;
    std::memcpy(dst, src, bytes);
    return context_call("cudaMemcpyAsync");
  }
  cudaError_t memcpy_peer_async(void* dst, int, const void* src, int, size_t bytes,
                                cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaError_t e = on_current(resolve(stream).device, "cudaMemcpyPeerAsync"); e != cudaSuccess)
      return e;
    std::memcpy(dst, src, bytes);
    return context_call("cudaMemcpyPeerAsync");
  }
  cudaError_t memset_async(void* dst, int value, size_t bytes, cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cudaError_t e = on_current(resolve(stream).device, "cudaMemsetAsync"); e != cudaSuccess)
      return e;
    std::memset(dst, value, bytes);
    return context_call("cudaMemsetAsync");
  }

 private:
  struct FakeStream {
    int device = 0;
    uint64_t id = 0;
  };
  struct FakeEvent {
    int device = 0;
  };
  struct ThreadState {
    int number = 0;
    int current = 0;
  };

  // (mu_ held by the callers below)
  ThreadState& thread() {
    auto [it, added] = threads_.try_emplace(std::this_thread::get_id());
    if (added) it->second.number = static_cast<int>(threads_.size());
    return it->second;
  }
  FakeStream resolve(cudaStream_t stream) {
    if (stream == nullptr) return FakeStream{thread().current, 0};
    return *reinterpret_cast<const FakeStream*>(stream);
  }
  static const FakeEvent* as_event(cudaEvent_t event) {
    return reinterpret_cast<const FakeEvent*>(event);
  }
  cudaError_t misuse(std::string what) {
    misuses_.push_back("thread " + std::to_string(thread().number) + ": " + std::move(what));
    return cudaErrorInvalidResourceHandle;
  }
  cudaError_t on_current(int device, const std::string& call) {
    const int current = thread().current;
    if (device == current) return cudaSuccess;
    return misuse(call + " on cuda:" + std::to_string(device) +
                  " with cuda:" + std::to_string(current) + " current");
  }
  cudaError_t context_call(const char* name) {
    ThreadState& t = thread();
    calls_.push_back(Call{t.number, name, t.current});
    if (contexts_.insert(t.current).second) {
      context_makers_.push_back("cuda:" + std::to_string(t.current) + " by " + name +
                                " on thread " + std::to_string(t.number));
    }
    return cudaSuccess;
  }

  const int devices_;
  mutable std::mutex mu_;
  std::map<std::thread::id, ThreadState> threads_;
  uint64_t next_stream_ = 0;
  std::vector<std::unique_ptr<FakeStream>> streams_;
  std::vector<std::unique_ptr<FakeEvent>> events_;
  std::set<void*> live_;
  std::map<void*, int> owner_;
  std::vector<Call> calls_;
  std::vector<Wait> waits_;
  std::vector<std::string> misuses_;
  std::set<int> contexts_;
  std::vector<std::string> context_makers_;
};

}  // namespace cohort::cuda::testing
