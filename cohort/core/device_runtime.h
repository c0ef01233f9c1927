// DeviceRuntime: what core needs from a device that is not the CPU -- memory,
// copies, streams and events -- as an interface that the optional device layer
// (cohort/cuda) implements and registers at start-up. Core, autograd, nn and
// optim reach devices only through it and through the per-op kernel tables
// (device_dispatch.h), so they include no CUDA header and build without the
// toolkit. A build without a device layer registers nothing, and asking for a
// device then fails naming what is missing (device_runtime()).
//
// Streams follow PyTorch: each thread has a current stream per device (the
// device's default stream until set_current_stream / StreamGuard changes it),
// ops enqueue their kernels on the current stream of their tensors' device,
// and memory freed on a stream is reused at once on that stream (stream
// order makes that safe) and on other streams only after record_stream's
// events have completed.
// Every blocking wait takes a time-out and throws TimeoutError naming what it
// waited for; a device failure throws cohort::Error naming the device and the
// call.
// Thread safety: the registry is set once at start-up (before threads use it);
// a runtime's members may be called from any thread; the current stream is
// per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/core/device.h"

namespace cohort {

// An ordered queue of device work. `handle` is the runtime's (a cudaStream_t);
// id 0 is the device's default stream.
struct Stream {
  Device device;
  void* handle = nullptr;
  uint64_t id = 0;
  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device == b.device && a.id == b.id;
  }
};

// A point in a stream's work; copies share one runtime event, returned to the
// runtime's pool with the last copy. A default Event is complete.
struct Event {
  Device device;
  std::shared_ptr<void> handle;
  bool valid() const { return handle != nullptr; }
};

// What a side stream is for. Each purpose has streams of its own, so that
// unrelated work never queues behind another's: a data loader's copy behind
// a collective that waits for a slow peer, or two groups' collectives in one
// order that their peers do not share.
enum class StreamPurpose {
  kUser,          // streams the program asks for: a pool per device, round robin
  kCollectives,   // a process group's: a stream of its own until release_stream
  kDataLoader,    // the data loaders' host-to-device copies: one per device
  kStagedCopies,  // device buffers staged through the host for host backends: one per device
};

struct DeviceProperties {
  int index = 0;
  std::string name;
  size_t total_memory = 0;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
};

// The caching allocator's numbers (torch.cuda.memory_stats' headline ones).
struct DeviceMemoryStats {
  size_t allocated = 0;       // bytes in blocks handed out now
  size_t reserved = 0;        // bytes obtained from the device (in use + cached)
  size_t peak_allocated = 0;  // since the start or reset_peak_memory_stats
  size_t peak_reserved = 0;
  uint64_t device_allocs = 0;  // calls to the device's allocator (cudaMalloc)
  uint64_t device_frees = 0;
  uint64_t cache_hits = 0;   // requests served from cached blocks
  uint64_t oom_retries = 0;  // times the cache was emptied to satisfy a request
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual DeviceType type() const = 0;

  // Devices this process can use; 0 with unavailable_reason() saying why
  // (no device, driver too old, ...). Never throws.
  virtual int device_count() = 0;
  virtual std::string unavailable_reason() = 0;
  virtual DeviceProperties properties(int index) = 0;
  // Versions for `cohort info` ("" when unknown).
  virtual std::string driver_version() = 0;
  virtual std::string runtime_version() = 0;
  virtual int current_device() = 0;
  virtual void set_device(int index) = 0;
  // Whether making device `index` current costs nothing more (CUDA: the
  // process already has its primary context, which cudaSetDevice would
  // otherwise create, taking some of the device's memory).
  virtual bool device_initialized(int index) {
    (void)index;
    return true;
  }

  // Memory, through the device's caching allocator: `nbytes` on device
  // `index` for use on `stream`. Throws OutOfMemory-style cohort::Error naming
  // the request and the statistics.
  virtual void* allocate(int index, size_t nbytes, const Stream& stream) = 0;
  virtual void deallocate(int index, void* ptr) = 0;
  // Marks memory as used by `stream` too (torch's Tensor.record_stream).
  virtual void record_stream(int index, void* ptr, const Stream& stream) = 0;
  virtual DeviceMemoryStats memory_stats(int index) = 0;
  virtual void reset_peak_memory_stats(int index) = 0;
  virtual void empty_cache() = 0;

  // Copies nbytes, enqueued on `stream` (of the device side; device to
  // device: of the destination). Host memory is staged through the pinned
  // pool, so the call returns once `src` may be reused; a copy into host
  // memory returns once the bytes have arrived.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                    const Stream& stream) = 0;
  virtual void fill_bytes(void* dst, int value, size_t nbytes, const Stream& stream) = 0;

  virtual Stream default_stream(int index) = 0;
  // A side stream of device `index` for `purpose` (non-blocking: it does not
  // wait for the default stream's work).
  virtual Stream side_stream(int index, StreamPurpose purpose) = 0;
  // Gives a kCollectives stream back for a later group (a group's owner
  // calls it once the group's work is done); other streams are shared and
  // stay, so this does nothing for them.
  virtual void release_stream(const Stream& stream) = 0;
  // A stream of the program's pool (round robin, like PyTorch's).
  Stream new_stream(int index) { return side_stream(index, StreamPurpose::kUser); }
  virtual Event record(const Stream& stream) = 0;
  // Makes `stream` wait for `event` on the device; the host does not wait.
  virtual void wait(const Stream& stream, const Event& event) = 0;
  virtual bool query(const Event& event) = 0;
  // Host waits; throws TimeoutError naming `what` past `timeout`.
  virtual void synchronize(const Event& event, std::chrono::milliseconds timeout,
                           std::string_view what) = 0;
};

// Registration by the device layer (static lifetime); null unregisters
// (tests' doubles).
void register_device_runtime(DeviceType type, DeviceRuntime* runtime);
DeviceRuntime* find_device_runtime(DeviceType type);
// The runtime of `device`, or NotSupported naming `what`, the device, and why
// there is none: not built with the device layer, or no usable device (its
// unavailable_reason), or an index past the device count.
DeviceRuntime& device_runtime(Device device, std::string_view what);
// `device` with its index filled from the current device (cpu unchanged).
Device resolve_device(Device device);

// The time-out of host waits on devices (copies to the host, stream
// synchronisation): the process Runtime's device_wait_timeout_s
// (COHORT_DEVICE_TIMEOUT_S at the edge).
std::chrono::milliseconds device_wait_timeout();

// The calling thread's current stream on `device` (resolved), the default
// stream until set.
Stream current_stream(Device device);
void set_current_stream(const Stream& stream);
// Host waits for the work enqueued so far on the current stream of `device`.
void synchronize_device(Device device, std::string_view what);

// Makes device `index` of `runtime` current on the calling thread for a
// scope (torch.cuda.device), then the previous one again -- unless that one
// is not initialised (device_initialized): selecting it would create a
// context for a thread that never worked there, so the thread stays on
// `index`, where it worked.
class DeviceScope {
 public:
  DeviceScope(DeviceRuntime& runtime, int index);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  DeviceRuntime& runtime_;
  int previous_ = -1;  // -1: nothing to restore
};

// Sets the current stream for a scope, restoring the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

}  // namespace cohort
