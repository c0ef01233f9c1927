#include "cohort/core/device_runtime.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <unordered_map>

#include "cohort/base/config.h"
#include "cohort/base/error.h"
#include "cohort/base/runtime.h"

namespace cohort {
namespace {

std::array<std::atomic<DeviceRuntime*>, kDeviceTypes> g_runtimes{};

// Per thread: device index -> current stream (CUDA; the CPU has none).
thread_local std::unordered_map<int, Stream> t_current_streams;

}  // namespace

void register_device_runtime(DeviceType type, DeviceRuntime* runtime) {
  g_runtimes[static_cast<size_t>(type)].store(runtime, std::memory_order_release);
}

DeviceRuntime* find_device_runtime(DeviceType type) {
  return g_runtimes[static_cast<size_t>(type)].load(std::memory_order_acquire);
}

DeviceRuntime& device_runtime(Device device, std::string_view what) {
  if (device.is_cpu()) {
    throw InvalidArgument(fmt::format("{}: the cpu has no device runtime", what));
  }
  DeviceRuntime* rt = find_device_runtime(device.type());
  if (rt == nullptr) {
    throw NotSupported(fmt::format(
        "{}: {} needs CUDA, and this cohort was built without it (COHORT_WITH_CUDA=OFF, or "
        "no CUDA toolkit was found at configure time; `cohort info` shows the build)",
        what, device.str()));
  }
  int count = rt->device_count();
  if (count == 0) {
    throw NotSupported(
        fmt::format("{}: {} is not available: {}", what, device.str(), rt->unavailable_reason()));
  }
  if (device.index() >= count) {
    throw InvalidArgument(fmt::format("{}: {} does not exist: this process sees {} CUDA device{}",
                                      what, device.str(), count, count == 1 ? "" : "s"));
  }
  return *rt;
}

Device resolve_device(Device device) {
  if (device.is_cpu() || device.has_index()) return device;
  DeviceRuntime& rt = device_runtime(device, "resolving the current device");
  return Device(device.type(), rt.current_device());
}

std::chrono::milliseconds device_wait_timeout() {
  const double s = Runtime::process().options().device_wait_timeout_s;
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(s * 1000)));
}

Stream current_stream(Device device) {
  device = resolve_device(device);
  COHORT_CHECK(!device.is_cpu(), "current_stream: the cpu has no streams");
  auto it = t_current_streams.find(device.index());
  if (it != t_current_streams.end()) return it->second;
  return device_runtime(device, "current_stream").default_stream(device.index());
}

void set_current_stream(const Stream& stream) {
  COHORT_CHECK(stream.device.is_cuda() && stream.device.has_index(),
               "set_current_stream: a stream of a cuda device with an index is needed, got {}",
               stream.device.str());
  t_current_streams[stream.device.index()] = stream;
}

void synchronize_device(Device device, std::string_view what) {
  if (device.is_cpu()) return;
  Stream s = current_stream(device);
  DeviceRuntime& rt = device_runtime(s.device, what);
  rt.synchronize(rt.record(s), device_wait_timeout(), what);
}

DeviceScope::DeviceScope(DeviceRuntime& runtime, int index) : runtime_(runtime) {
  const int current = runtime_.current_device();
  if (current == index) return;
  runtime_.set_device(index);
  if (runtime_.device_initialized(current)) previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0) return;
  try {
    runtime_.set_device(previous_);
  } catch (...) {
    // A destructor cannot report; the next call that needs a device selects it.
  }
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device)) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() { t_current_streams[previous_.device.index()] = previous_; }

}  // namespace cohort
