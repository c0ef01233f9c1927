// PyTorch's free functions: init_process_group and friends.
#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/collectives/knobs.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/env_bootstrap.h"

namespace cohort::distributed {

std::shared_ptr<ProcessGroup> init_process_group(BackendKind backend,
                                                 const std::string& init_method, int world_size,
                                                 int rank, Duration timeout) {
  COHORT_CHECK(timeout > Duration::zero(),
               "init_process_group: timeout must be positive, got {} ms", timeout.count());
  ProcessGroupOptions options;
  options.timeout = timeout;
  if (!backend_available(backend) || backend == BackendKind::kMpi) {
    // No store: MPI brings its own bootstrap (mpirun); an unavailable
    // backend throws NotSupported before anything waits on other ranks.
    return ProcessGroup::create(backend, nullptr, rank, world_size, options);
  }
  rendezvous::BootstrapOptions bo;
  bo.rank = rank;
  bo.world_size = world_size;
  bo.timeout = timeout;
  bo.knobs = collectives::knob_names();
  rendezvous::BootstrapResult r = rendezvous::bootstrap(init_method, bo);
  options.network = r.network;
  options.flight_recorder_dir = r.flight_recorder_dir;
  collectives::apply_knobs(r.knobs, options.transport, options.tuning);
  return ProcessGroup::create(backend, r.store, r.rank, r.world_size, options);
}

std::shared_ptr<ProcessGroup> init_process_group(std::string_view backend,
                                                 const std::string& init_method, int world_size,
                                                 int rank, Duration timeout) {
  return init_process_group(parse_backend(backend), init_method, world_size, rank, timeout);
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
