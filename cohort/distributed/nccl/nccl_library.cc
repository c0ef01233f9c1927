#include "cohort/distributed/nccl/nccl_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::distributed::detail {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";

// The folder of the shared object defining `symbol` in this process ("" when
// none does).
std::string folder_of(const char* symbol) {
  void* p = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path(info.dli_fname);
  return path.substr(0, path.rfind('/') + 1);
}

void* open_library(std::string& tried, std::string& error) {
  std::vector<std::string> candidates{kLibrary};
  // Beside the CUDA runtime (the toolkit's lib folder, which an installed
  // program's search path may not name).
  if (std::string dir = folder_of("cudaGetDeviceCount"); !dir.empty()) {
    candidates.push_back(dir + kLibrary);
  }
#ifdef COHORT_NCCL_LIBRARY_PATH
  candidates.push_back(COHORT_NCCL_LIBRARY_PATH);  // where CMake found it
#endif
  for (const std::string& c : candidates) {
    tried += (tried.empty() ? "" : ", ") + c;
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    error = e ? e : "unknown dlopen error";
  }
  return nullptr;
}

template <typename Fn>
void resolve(void* handle, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) {
    throw NotSupported(
        fmt::format("nccl backend: {} has no {} (NCCL 2.14 or newer is needed)", kLibrary, name));
  }
}

std::unique_ptr<NcclLibrary> load() {
  std::string tried, error;
  void* h = open_library(tried, error);
  if (h == nullptr) {
    throw NotSupported(fmt::format(
        "nccl backend: {} could not be loaded (tried {}): {}; it comes with the CUDA toolkit or "
        "PyTorch's nvidia-nccl package: put its folder on LD_LIBRARY_PATH, or use the native "
        "backend",
        kLibrary, tried, error));
  }
  auto lib = std::make_unique<NcclLibrary>();
  resolve(h, lib->get_version, "ncclGetVersion");
  resolve(h, lib->get_unique_id, "ncclGetUniqueId");
  resolve(h, lib->comm_init_rank_config, "ncclCommInitRankConfig");
  resolve(h, lib->comm_finalize, "ncclCommFinalize");
  resolve(h, lib->comm_destroy, "ncclCommDestroy");
  resolve(h, lib->comm_abort, "ncclCommAbort");
  resolve(h, lib->comm_get_async_error, "ncclCommGetAsyncError");
  resolve(h, lib->get_error_string, "ncclGetErrorString");
  resolve(h, lib->get_last_error, "ncclGetLastError");
  resolve(h, lib->all_reduce, "ncclAllReduce");
  resolve(h, lib->broadcast, "ncclBroadcast");
  resolve(h, lib->reduce, "ncclReduce");
  resolve(h, lib->all_gather, "ncclAllGather");
  resolve(h, lib->reduce_scatter, "ncclReduceScatter");
  resolve(h, lib->send, "ncclSend");
  resolve(h, lib->recv, "ncclRecv");
  resolve(h, lib->group_start, "ncclGroupStart");
  resolve(h, lib->group_end, "ncclGroupEnd");
  if (lib->get_version(&lib->version) != ncclSuccess) lib->version = 0;
  return lib;
}

}  // namespace

const NcclLibrary& nccl_library() {
  // A failure is kept and thrown again to every caller: opening the library
  // is not retried (the process's search path does not change).
  static std::once_flag once;
  static std::unique_ptr<NcclLibrary> lib;
  static std::string failure;
  std::call_once(once, [] {
    try {
      lib = load();
    } catch (const NotSupported& e) {
      failure = e.what();
    }
  });
  if (!lib) throw NotSupported(failure);
  return *lib;
}

}  // namespace cohort::distributed::detail
