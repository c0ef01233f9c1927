// CudaRuntime: core's DeviceRuntime over a CudaApi (cuda_api.h). The
// process's runtime (runtime.h's runtime()) is one over the real CUDA
// runtime; tests make their own over a fake of several devices and register
// it with core for their scope. Not installed: the layer's and its tests'.
//
// Every entry point that touches a device's memory, stream or event selects
// that device first (DeviceGuard), whatever the calling thread's current
// device: a wait on the default stream (the null handle) is otherwise
// enqueued on the current device's, and a call from a thread that never
// chose a device creates a context on GPU 0.
// Side streams are per purpose (StreamPurpose): a pool of kUserStreams for
// the program, round robin; one for the data loaders' copies and one for
// staged copies per device; and a stream of its own for each process group
// (kCollectives), kept for reuse once released.
// Thread safety: every member may be called from any thread.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cohort/core/caching_allocator.h"
#include "cohort/core/device_runtime.h"
#include "cohort/cuda/cuda_api.h"
#include "cohort/cuda/device_memory.h"

namespace cohort::cuda {

class CudaRuntime final : public DeviceRuntime {
 public:
  static constexpr int kUserStreams = 4;

  // `api` outlives the runtime. `attach_caches`: its allocators are counted
  // and emptied with the process Runtime's caches (base/runtime.h), for the
  // process's runtime, which is never destroyed; not for a test's.
  CudaRuntime(CudaApi& api, bool attach_caches);

  DeviceType type() const override { return DeviceType::kCUDA; }
  int device_count() override;
  std::string unavailable_reason() override;
  DeviceProperties properties(int index) override;
  std::string driver_version() override;
  std::string runtime_version() override;
  int current_device() override;
  void set_device(int index) override;
  bool device_initialized(int index) override { return api_.has_context(index); }

  void* allocate(int index, size_t nbytes, const Stream& stream) override;
  void deallocate(int index, void* ptr) override;
  void record_stream(int index, void* ptr, const Stream& stream) override;
  DeviceMemoryStats memory_stats(int index) override;
  void reset_peak_memory_stats(int index) override;
  void empty_cache() override;

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
            const Stream& stream) override;
  void fill_bytes(void* dst, int value, size_t nbytes, const Stream& stream) override;

  Stream default_stream(int index) override;
  Stream side_stream(int index, StreamPurpose purpose) override;
  void release_stream(const Stream& stream) override;
  Event record(const Stream& stream) override;
  void wait(const Stream& stream, const Event& event) override;
  bool query(const Event& event) override;
  void synchronize(const Event& event, std::chrono::milliseconds timeout,
                   std::string_view what) override;

  // Streaming multiprocessors of device `index` (cached).
  int multiprocessors(int index);

 private:
  struct SideStream {
    cudaStream_t handle = nullptr;
    uint64_t id = 0;
  };
  struct PerDevice {
    std::unique_ptr<CudaDeviceMemory> memory;
    std::unique_ptr<CachingAllocator> allocator;
    std::array<SideStream, kUserStreams> user{};
    size_t next_user = 0;
    SideStream data_loader, staged;
    std::vector<uint64_t> collective_ids;                // every kCollectives stream made
    std::vector<SideStream> free_collectives;            // released, for the next group
    std::unordered_map<uint64_t, cudaStream_t> handles;  // id -> stream, side streams
    uint64_t next_id = 1;                                // 0 is the default stream
    int multiprocessors = 0;
  };

  PerDevice& device(int index);
  CachingAllocator& pinned();
  void probe();
  // A new non-blocking stream of `d` (mu_ held).
  SideStream create_stream(int index, PerDevice& d);

  CudaApi& api_;
  const bool attach_caches_;
  std::once_flag probed_;
  int count_ = 0;
  std::string reason_;
  std::mutex mu_;
  std::unordered_map<int, std::unique_ptr<PerDevice>> devices_;
  PinnedHostMemory pinned_memory_;
  std::unique_ptr<CachingAllocator> pinned_;
};

}  // namespace cohort::cuda
