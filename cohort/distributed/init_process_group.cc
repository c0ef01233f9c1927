// PyTorch's free functions: init_process_group and friends, and
// init_worker_group (backend_choice.h), which also places a worker on its GPU.
//
// Device of an nccl group: init_process_group makes cuda:(LOCAL_RANK mod
// device count) the current device before it creates the group (what every
// tutorial does by hand with torch.cuda.set_device(local_rank)), so the
// workers of `cohort run`, torchrun, mpirun (OMPI_COMM_WORLD_LOCAL_RANK) and
// srun (SLURM_LOCALID) each get their own GPU; LOCAL_RANK is the bootstrap's
// (rendezvous/env_bootstrap.h), the edge that reads the environment.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/collectives/knobs.h"
#include "cohort/core/device_runtime.h"
#include "cohort/distributed/backend_choice.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/env_bootstrap.h"

namespace cohort::distributed {
namespace {

// The bootstrap of a store-based group (native, nccl) and the options it
// gives the group.
rendezvous::BootstrapResult meet(const std::string& init_method, int world_size, int rank,
                                 Duration timeout, ProcessGroupOptions& options) {
  COHORT_CHECK(timeout > Duration::zero(),
               "init_process_group: timeout must be positive, got {} ms", timeout.count());
  options.timeout = timeout;
  rendezvous::BootstrapOptions bo;
  bo.rank = rank;
  bo.world_size = world_size;
  bo.timeout = timeout;
  bo.knobs = collectives::knob_names();
  rendezvous::BootstrapResult r = rendezvous::bootstrap(init_method, bo);
  options.network = r.network;
  options.flight_recorder_dir = r.flight_recorder_dir;
  collectives::apply_knobs(r.knobs, options.transport, options.tuning);
  return r;
}

}  // namespace

ProcessGroupOptions options_from_env(Duration timeout) {
  COHORT_CHECK(timeout > Duration::zero(), "options_from_env: timeout must be positive, got {} ms",
               timeout.count());
  ProcessGroupOptions options;
  options.timeout = timeout;
  rendezvous::GroupEnvSettings g = rendezvous::read_group_env_settings(collectives::knob_names());
  options.network = std::move(g.network);
  options.flight_recorder_dir = std::move(g.flight_recorder_dir);
  collectives::apply_knobs(g.knobs, options.transport, options.tuning);
  return options;
}

namespace {

// Groups without a store: MPI brings its own bootstrap (mpirun); an
// unavailable backend throws NotSupported before anything waits on other ranks.
bool needs_no_store(BackendKind backend) {
  return !backend_available(backend) || backend == BackendKind::kMpi;
}

// mpirun's workers have no store bootstrap here: the ranks on this host are
// found by comparing host names over the group (MPI_Comm_split_type's idea).
void place_by_host_name(ProcessGroup& pg, WorkerGroup& w) {
  constexpr size_t kName = 256;
  std::array<char, kName> mine{};
  COHORT_CHECK(::gethostname(mine.data(), kName - 1) == 0,
               "init_worker_group: rank {}: gethostname failed: {}", pg.rank(),
               std::strerror(errno));
  std::vector<char> all(kName * static_cast<size_t>(pg.size()));
  pg.all_gather(mine.data(), all.data(), kName, DataType::kUInt8);
  w.local_rank = 0;
  w.local_world_size = 0;
  for (int r = 0; r < pg.size(); ++r) {
    if (std::memcmp(all.data() + kName * static_cast<size_t>(r), mine.data(), kName) != 0) continue;
    ++w.local_world_size;
    if (r < pg.rank()) ++w.local_rank;
  }
}

// The device count a CUDA worker sees (device_runtime names what is missing).
int cuda_device_count(Device device, std::string_view what) {
  return device_runtime(Device(device.type()), what).device_count();
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(BackendKind backend,
                                                 const std::string& init_method, int world_size,
                                                 int rank, Duration timeout) {
  ProcessGroupOptions options;
  if (needs_no_store(backend)) {
    COHORT_CHECK(timeout > Duration::zero(),
                 "init_process_group: timeout must be positive, got {} ms", timeout.count());
    options.timeout = timeout;
    return ProcessGroup::create(backend, nullptr, rank, world_size, options);
  }
  // No GPU: say so before waiting for the other ranks.
  if (backend == BackendKind::kNccl)
    device_runtime(Device(DeviceType::kCUDA), "init_process_group(\"nccl\")");
  rendezvous::BootstrapResult r = meet(init_method, world_size, rank, timeout, options);
  if (backend == BackendKind::kNccl && options.device_index < 0) {
    options.device_index = set_worker_cuda_device(r.local_rank);
  }
  return ProcessGroup::create(backend, r.store, r.rank, r.world_size, options);
}

std::shared_ptr<ProcessGroup> init_process_group(std::string_view backend,
                                                 const std::string& init_method, int world_size,
                                                 int rank, Duration timeout) {
  return init_process_group(parse_backend(backend), init_method, world_size, rank, timeout);
}

WorkerGroup init_worker_group(std::string_view backend, Device device,
                              const std::string& init_method, Duration timeout) {
  constexpr std::string_view kWhat = "init_worker_group: this worker's device";
  WorkerGroup w;
  const bool auto_choice = backend == "auto";
  const BackendKind asked = auto_choice ? BackendKind::kNative : parse_backend(backend);
  if (!auto_choice && needs_no_store(asked)) {
    w.group = init_process_group(asked, init_method, -1, -1, timeout);
    place_by_host_name(*w.group, w);
    w.device =
        worker_device(device, w.local_rank, device.is_cpu() ? 0 : cuda_device_count(device, kWhat));
    w.backend = {asked, "asked for"};
    if (w.device.is_cuda()) device_runtime(w.device, kWhat).set_device(w.device.index());
  } else {
    ProcessGroupOptions options;
    rendezvous::BootstrapResult r = meet(init_method, -1, -1, timeout, options);
    w.local_rank = r.local_rank;
    w.local_world_size = r.local_world_size;
    const int count = device.is_cpu() ? 0 : cuda_device_count(device, kWhat);
    w.device = worker_device(device, w.local_rank, count);
    w.backend = auto_choice ? choose_backend(device.type(), w.local_world_size, count,
                                             backend_available(BackendKind::kNccl))
                            : BackendChoice{asked, "asked for"};
    if (w.device.is_cuda()) {
      // Current before the group exists: NCCL's communicator is created on it.
      device_runtime(w.device, kWhat).set_device(w.device.index());
      options.device_index = w.device.index();
    }
    w.group = ProcessGroup::create(w.backend.kind, r.store, r.rank, r.world_size, options);
  }
  return w;
}

void destroy_process_group(std::shared_ptr<ProcessGroup>& pg) {
  if (!pg) return;
  pg->destroy();
  pg.reset();
}

int get_rank(const ProcessGroup& pg) { return pg.rank(); }
int get_world_size(const ProcessGroup& pg) { return pg.size(); }

std::shared_ptr<ProcessGroup> new_group(ProcessGroup& parent, std::vector<int> ranks) {
  return parent.new_group(std::move(ranks));
}

}  // namespace cohort::distributed
