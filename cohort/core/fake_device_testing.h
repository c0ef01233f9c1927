// A test double of a CUDA device for machines without a GPU: FakeCudaDevice
// registers, for its scope, a DeviceRuntime whose "device memory" is host
// memory behind core's real CachingAllocator, whose streams are ids and whose
// events complete when the test says so, plus copy_ and fill_ kernels that
// run the CPU code on that memory. Tests use it to check what needs no GPU:
// device checks and their errors, allocator bookkeeping, tensors and modules
// moved between devices, checkpoints written from a device. It proves nothing
// about CUDA kernels (the cuda layer's tests do, on a GPU).
// Thread safety: install it before the test's threads start; one at a time.
#pragma once

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cohort/base/caches.h"
#include "cohort/core/caching_allocator.h"
#include "cohort/core/device_runtime.h"
#include "cohort/core/tensor_device_ops.h"

namespace cohort::testing {

// Host memory counted like device memory; `fail_after` makes raw_alloc return
// null (out of memory) once that many bytes are outstanding.
class FakeDeviceMemory final : public DeviceMemory {
 public:
  void* raw_alloc(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu);
    if (fail_above > 0 && outstanding + nbytes > fail_above) return nullptr;
    outstanding += nbytes;
    ++allocs;
    void* p = aligned_allocate(nbytes);
    live[p] = nbytes;
    return p;
  }
  void raw_free(void* ptr) noexcept override {
    std::lock_guard<std::mutex> lock(mu);
    ++frees;
    outstanding -= live[ptr];
    live.erase(ptr);
    aligned_free(ptr);
  }
  std::string describe() override { return "fake device full"; }
  std::shared_ptr<void> record(const Stream&) override {
    std::lock_guard<std::mutex> lock(mu);
    auto e = std::make_shared<std::atomic<bool>>(complete_events);
    events.push_back(e);
    return e;
  }
  bool done(const std::shared_ptr<void>& e) override {
    return static_cast<std::atomic<bool>*>(e.get())->load();
  }
  void complete_all() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& e : events) e->store(true);
  }

  std::mutex mu;  // ranks on threads share the fake device
  size_t fail_above = 0;
  size_t outstanding = 0;  // bytes held from this "device" now
  int allocs = 0, frees = 0;
  bool complete_events = true;
  std::unordered_map<void*, size_t> live;
  std::vector<std::shared_ptr<std::atomic<bool>>> events;
};

// A CPU tensor over the same bytes as a fake-device tensor.
inline Tensor host_alias(const Tensor& t) {
  auto s = std::make_shared<Storage>(t.storage()->data(), t.storage()->nbytes(), nullptr, kCPU);
  return Tensor::from_storage(std::move(s), t.sizes(), t.strides(), t.storage_offset(), t.dtype());
}

class FakeCudaDevice final : public DeviceRuntime {
 public:
  explicit FakeCudaDevice(int devices = 1) : devices_(devices) {
    for (int i = 0; i < devices; ++i) {
      allocators_.push_back(
          std::make_unique<CachingAllocator>("cuda:" + std::to_string(i), memory_));
    }
    previous_ = find_device_runtime(DeviceType::kCUDA);
    previous_copy_ = copy_device;
    previous_fill_ = fill_device;
    register_device_runtime(DeviceType::kCUDA, this);
    copy_device.set(DeviceType::kCUDA, [](const Tensor& dst, const Tensor& src) {
      host_alias(dst).copy_(host_alias(src));
    });
    fill_device.set(DeviceType::kCUDA,
                    [](const Tensor& dst, double v) { host_alias(dst).fill_(v); });
  }
  ~FakeCudaDevice() override {
    register_device_runtime(DeviceType::kCUDA, previous_);
    copy_device = previous_copy_;
    fill_device = previous_fill_;
  }

  DeviceType type() const override { return DeviceType::kCUDA; }
  int device_count() override { return devices_; }
  std::string unavailable_reason() override { return devices_ ? "" : "the fake has no devices"; }
  DeviceProperties properties(int index) override {
    return DeviceProperties{index, "fake", size_t{1} << 30, 9, 0, 1};
  }
  std::string driver_version() override { return "fake"; }
  std::string runtime_version() override { return "fake"; }
  // Per thread, as CUDA's (0 on a thread that never chose).
  int current_device() override {
    std::lock_guard<std::mutex> lock(streams_mu_);
    auto it = current_.find(std::this_thread::get_id());
    return it == current_.end() ? 0 : it->second;
  }
  void set_device(int index) override {
    std::lock_guard<std::mutex> lock(streams_mu_);
    current_[std::this_thread::get_id()] = index;
  }
  void* allocate(int index, size_t nbytes, const Stream& s) override {
    return allocators_.at(index)->allocate(nbytes, s);
  }
  void deallocate(int index, void* p) override { allocators_.at(index)->deallocate(p); }
  void record_stream(int index, void* p, const Stream& s) override {
    allocators_.at(index)->record_stream(p, s);
  }
  DeviceMemoryStats memory_stats(int index) override { return allocators_.at(index)->stats(); }
  void reset_peak_memory_stats(int index) override { allocators_.at(index)->reset_peak(); }
  void empty_cache() override {
    for (auto& a : allocators_) a->empty_cache();
  }
  void copy(void* dst, Device dd, const void* src, Device sd, size_t n, const Stream&) override {
    std::lock_guard<std::mutex> lock(memory_.mu);
    ++copies;
    if (dd.is_cpu()) ++copies_to_host;
    std::memcpy(dst, src, n);
  }
  void fill_bytes(void* dst, int value, size_t n, const Stream&) override {
    std::memset(dst, value, n);
  }
  Stream default_stream(int index) override {
    return Stream{Device(DeviceType::kCUDA, index), nullptr, 0};
  }
  // kUser: a new id each call; kCollectives: one of its own until
  // released; the others: one per device and purpose.
  Stream side_stream(int index, StreamPurpose purpose) override {
    std::lock_guard<std::mutex> lock(streams_mu_);
    const Device d(DeviceType::kCUDA, index);
    if (purpose == StreamPurpose::kUser) return Stream{d, nullptr, ++next_stream_};
    if (purpose == StreamPurpose::kCollectives) {
      auto& free = released_[index];
      if (free.empty()) {
        collective_ids_.insert(++next_stream_);
        return Stream{d, nullptr, next_stream_};
      }
      Stream s{d, nullptr, free.back()};
      free.pop_back();
      return s;
    }
    uint64_t& id = shared_[{index, static_cast<int>(purpose)}];
    if (id == 0) id = ++next_stream_;
    return Stream{d, nullptr, id};
  }
  void release_stream(const Stream& s) override {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (collective_ids_.count(s.id)) released_[s.device.index()].push_back(s.id);
  }
  Event record(const Stream& s) override { return Event{s.device, memory_.record(s)}; }
  void wait(const Stream&, const Event&) override { ++waits; }
  bool query(const Event& e) override { return !e.valid() || memory_.done(e.handle); }
  void synchronize(const Event& e, std::chrono::milliseconds timeout,
                   std::string_view what) override {
    if (!query(e)) {
      throw TimeoutError(std::string(what) + ": fake device work never completes");
    }
  }

  FakeDeviceMemory& memory() { return memory_; }
  int copies = 0, copies_to_host = 0;  // under memory().mu
  std::atomic<int> waits{0};

 private:
  int devices_;
  std::mutex streams_mu_;  // the members below
  std::map<std::thread::id, int> current_;
  uint64_t next_stream_ = 0;
  std::map<std::pair<int, int>, uint64_t> shared_;  // (device, purpose) -> stream id
  std::set<uint64_t> collective_ids_;
  std::map<int, std::vector<uint64_t>> released_;  // kCollectives ids given back
  FakeDeviceMemory memory_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
  DeviceRuntime* previous_ = nullptr;
  DeviceOp<void(const Tensor&, const Tensor&)> previous_copy_{"copy_"};
  DeviceOp<void(const Tensor&, double)> previous_fill_{"fill_"};
};

}  // namespace cohort::testing
