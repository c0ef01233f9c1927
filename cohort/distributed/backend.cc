#include "cohort/distributed/backend.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "cohort/base/config.h"
#include "cohort/base/error.h"
#include "cohort/distributed/native_backend.h"
#include "cohort/distributed/nccl/nccl_backend.h"
#if COHORT_HAVE_MPI
#include "cohort/distributed/mpi/mpi_backend.h"
#endif

namespace cohort::distributed {

std::string_view backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kNative:
      return "native";
    case BackendKind::kMpi:
      return "mpi";
    case BackendKind::kNccl:
      return "nccl";
  }
  return "?";
}

BackendKind parse_backend(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "native") return BackendKind::kNative;
  if (lower == "mpi") return BackendKind::kMpi;
  if (lower == "nccl") return BackendKind::kNccl;
  throw InvalidArgument(
      fmt::format("init_process_group: unknown backend '{}'; expected native, mpi or nccl", name));
}

bool backend_available(BackendKind kind) {
  switch (kind) {
    case BackendKind::kNative:
      return true;
    case BackendKind::kMpi:
      return COHORT_HAVE_MPI != 0;
    case BackendKind::kNccl:
      return COHORT_HAVE_NCCL != 0;
  }
  return false;
}

DeviceCompletion Backend::run_on_device(const OpArgs& a, const DeviceOpContext& ctx) {
  throw NotSupported(fmt::format("{} backend: {} on {} buffers is not supported",
                                 backend_name(kind()), collectives::op_kind_name(a.kind),
                                 ctx.device.str()));
}

std::unique_ptr<Backend> create_backend(BackendKind kind, std::shared_ptr<rendezvous::Store> store,
                                        int rank, int size, const ProcessGroupOptions& options) {
  switch (kind) {
    case BackendKind::kNative:
      COHORT_CHECK(store != nullptr, "native backend: a store is required");
      COHORT_CHECK(size >= 1 && rank >= 0 && rank < size,
                   "native backend: rank must be in [0, world_size), got rank {} world_size {}",
                   rank, size);
      return std::make_unique<NativeBackend>(store, rank, size, options);
    case BackendKind::kMpi:
#if COHORT_HAVE_MPI
      return MpiBackend::create_world(rank, size, options);
#else
      throw NotSupported("mpi backend not built: cohort was built without MPI (COHORT_HAVE_MPI=0)");
#endif
    case BackendKind::kNccl:
      // NotSupported in a build without NCCL, or without a CUDA device.
      return NcclBackend::create(std::move(store), rank, size, options);
  }
  throw InvalidArgument("create_backend: unknown backend kind");
}

}  // namespace cohort::distributed
