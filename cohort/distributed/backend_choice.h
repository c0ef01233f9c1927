// Backend and device choice for the workers of a job on GPUs (PyTorch's
// `torch.cuda.set_device(local_rank)` and "nccl for CUDA tensors" made one
// rule). The rules are pure functions of a worker's placement (its local
// rank, the ranks on its host) and the device count, so they are tested on
// the CPU; init_worker_group applies them to a job the environment describes.
//
//   worker_device:  "cuda" without an index is cuda:(local_rank mod count),
//                   so the workers of `cohort run`, torchrun, mpirun and srun
//                   each take their own GPU (several share one when there are
//                   more local ranks than GPUs); "cuda:N" and "cpu" are kept.
//   choose_backend: "auto" for a group: nccl for CUDA tensors when every local
//                   rank has its own GPU and this build has NCCL; otherwise
//                   native, which stages CUDA tensors through host memory
//                   (NCCL refuses two ranks on one GPU: "Duplicate GPU
//                   detected"). BackendKind has no "auto": it is resolved
//                   here, by the caller of init_process_group (the CLI).
//
// Thread safety: the pure functions are; set_worker_cuda_device and
// init_worker_group change the calling thread's current device (as
// cudaSetDevice does) and are called once, at start. Errors: NotSupported
// naming what is missing (no CUDA runtime in the build, no usable device).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cohort/core/device.h"
#include "cohort/distributed/process_group.h"

namespace cohort::distributed {

// What carries a group's collectives and why (for the worker's start-up line).
struct BackendChoice {
  BackendKind kind = BackendKind::kNative;
  std::string reason;
};

// `auto` for tensors on `tensors` (kCPU or kCUDA) with `local_world_size`
// ranks on this host (LOCAL_WORLD_SIZE), `device_count` GPUs visible to each
// and NCCL built or not (backend_available(BackendKind::kNccl)). On the CPU
// it is native (the CLI prefers mpi under mpirun itself).
BackendChoice choose_backend(DeviceType tensors, int local_world_size, int device_count,
                             bool nccl_available);

// The device a worker trains on (see the header comment). InvalidArgument for
// a negative local rank; NotSupported for "cuda" without an index when
// device_count is 0.
Device worker_device(Device requested, int local_rank, int device_count);

// Makes cuda:(local_rank mod count) the current device through core's device
// runtime (find_device_runtime(kCUDA)->set_device) and returns its index:
// what init_process_group does for an nccl group before creating it.
// NotSupported when the build has no CUDA runtime or no device is usable.
int set_worker_cuda_device(int local_rank);

// A worker's world group and where its tensors live.
struct WorkerGroup {
  std::shared_ptr<ProcessGroup> group;
  Device device;          // worker_device(requested, local rank, count); current when CUDA
  BackendChoice backend;  // what carries `group`, and why
  int local_rank = 0;
  int local_world_size = 1;
};

// Joins the job as init_process_group(backend, init_method) does, for tensors
// on `device`: the placement (local rank, local world size) comes from the
// bootstrap (LOCAL_RANK / LOCAL_WORLD_SIZE, or mpirun's and Slurm's, see
// rendezvous/env_bootstrap.h); a CUDA device is resolved by worker_device and
// made current before the group is created. backend: "auto" (choose_backend),
// "native", "nccl" (its reason says it was asked for) or "mpi" (mpirun's
// bootstrap: the placement is found by comparing host names over the group).
// Errors as init_process_group's, plus NotSupported for a CUDA device where
// none is usable.
WorkerGroup init_worker_group(std::string_view backend, Device device,
                              const std::string& init_method = "env://",
                              Duration timeout = kDefaultGroupTimeout);

}  // namespace cohort::distributed
