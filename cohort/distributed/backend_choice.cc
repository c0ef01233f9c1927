#include "cohort/distributed/backend_choice.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/core/device_runtime.h"

namespace cohort::distributed {

BackendChoice choose_backend(DeviceType tensors, int local_world_size, int device_count,
                             bool nccl_available) {
  if (tensors == DeviceType::kCPU) return {BackendKind::kNative, "CPU tensors"};
  constexpr std::string_view kStaging = "native stages CUDA tensors through host memory";
  if (!nccl_available)
    return {BackendKind::kNative, fmt::format("this build has no NCCL; {}", kStaging)};
  if (device_count <= 0)
    return {BackendKind::kNative, fmt::format("no GPU is usable; {}", kStaging)};
  if (local_world_size > device_count) {
    // NCCL checks for it at communicator creation ("Duplicate GPU detected");
    // its maintainers say it cannot work with the check removed.
    return {BackendKind::kNative,
            fmt::format("{} local ranks share {} GPU{}: NCCL refuses two ranks on one GPU; {}",
                        local_world_size, device_count, device_count == 1 ? "" : "s", kStaging)};
  }
  return {BackendKind::kNccl,
          fmt::format("CUDA tensors, and each of the {} local rank{} has its own GPU ({} visible)",
                      local_world_size, local_world_size == 1 ? "" : "s", device_count)};
}

Device worker_device(Device requested, int local_rank, int device_count) {
  COHORT_CHECK(local_rank >= 0, "worker_device: the local rank must be >= 0, got {}", local_rank);
  if (requested.is_cpu() || requested.has_index()) return requested;
  if (device_count <= 0) {
    throw NotSupported(
        fmt::format("worker_device: local rank {} asks for {}, but no {} device is usable here",
                    local_rank, requested.str(), device_type_name(requested.type())));
  }
  return Device(requested.type(), local_rank % device_count);
}

int set_worker_cuda_device(int local_rank) {
  // device_runtime names what is missing (no CUDA in the build, no device).
  DeviceRuntime& rt = device_runtime(Device(DeviceType::kCUDA), "choosing this worker's GPU");
  const Device d = worker_device(Device(DeviceType::kCUDA), local_rank, rt.device_count());
  rt.set_device(d.index());
  return d.index();
}

}  // namespace cohort::distributed
