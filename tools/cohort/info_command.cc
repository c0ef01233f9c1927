// `cohort info`: version, CPU and kernel path, bf16 path, BLAS, thread count, optional backends.
#include <cblas.h>

#include <cstdio>
#include <string>

#include "cohort/base/config.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/core/device_runtime.h"
#include "cohort/core/native/linalg_bf16.h"
#include "tools/cohort/command.h"

extern "C" char* openblas_get_config(void);

namespace cohort::cli {
namespace {

// The GPUs this process can use, or why there are none.
void print_gpus() {
  DeviceRuntime* rt = find_device_runtime(DeviceType::kCUDA);
  if (rt == nullptr) {
    std::printf("gpus: none: built without CUDA (COHORT_WITH_CUDA=OFF, or no toolkit found)\n");
    return;
  }
  std::printf("cuda: runtime %s, driver %s, kernels for sm_%s\n", rt->runtime_version().c_str(),
              rt->driver_version().empty() ? "unknown" : rt->driver_version().c_str(),
              COHORT_CUDA_ARCHITECTURES);
  int n = rt->device_count();
  if (n == 0) {
    std::printf("gpus: none: %s\n", rt->unavailable_reason().c_str());
    return;
  }
  for (int i = 0; i < n; ++i) {
    DeviceProperties p = rt->properties(i);
    std::printf("gpu cuda:%d: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", i, p.name.c_str(),
                p.major, p.minor, p.multiprocessors,
                static_cast<double>(p.total_memory) / (1 << 30));
  }
}

int run_info() {
  std::printf("cohort %s\n", COHORT_VERSION);
  const CpuFeatures& cpu = cpu_features();
  std::string features, paths;
  for (const std::string& f : cpu.names()) features += (features.empty() ? "" : " ") + f;
  for (KernelPath p : supported_kernel_paths())
    paths += (paths.empty() ? "" : ", ") + std::string(kernel_path_name(p));
  std::printf("cpu: %s (%s)\n", cpu.model.c_str(), cpu.arch.c_str());
  std::printf("cpu features: %s\n", features.empty() ? "(none of interest)" : features.c_str());
  std::printf("kernel paths: %s (this CPU); in use: %s%s\n", paths.c_str(),
              kernel_path_name(kernel_path()),
              kernel_path() == best_kernel_path() ? "" : " (forced)");
  // The bf16 path --precision bf16 uses, the others this CPU runs, and why
  // the rest do not run here.
  std::string bf16_paths, bf16_missing;
  for (native::Bf16Path p :
       {native::Bf16Path::kEmulated, native::Bf16Path::kAvx512Bf16, native::Bf16Path::kOnednn}) {
    const std::string why = native::bf16_path_unsupported_reason(p);
    if (why.empty())
      bf16_paths += std::string(bf16_paths.empty() ? "" : ", ") + native::bf16_path_name(p);
    else
      bf16_missing += std::string("; ") + native::bf16_path_name(p) + ": " + why;
  }
  std::printf("bf16 path: %s (this CPU runs: %s%s)\n",
              native::bf16_path_name(native::best_bf16_path()), bf16_paths.c_str(),
              bf16_missing.c_str());
  std::printf("blas: OpenBLAS (%s)\n", openblas_get_config());
  std::printf("threads: %d\n", num_threads());
  print_gpus();
  std::printf("backends: native%s%s\n", COHORT_HAVE_MPI ? ", mpi" : "",
              COHORT_HAVE_NCCL ? ", nccl" : "");
  std::printf("adapters: %s\n", COHORT_HAVE_LIBTORCH ? "libtorch (cohort_libtorch)"
                                                     : "none (built without LibTorch)");
  std::printf("torch.distributed backend: %s\n",
              COHORT_HAVE_TORCH_BACKEND
                  ? "cohort (Python package cohort_torch: import cohort_torch, then "
                    "init_process_group(\"cohort\"))"
                  : "not built (needs python3-torch, libtorch-dev and pybind11-dev)");
  return 0;
}

CommandRegistrar reg(
    {"info", "Print version, CPU features and kernel path, BLAS, thread count and built backends",
     [](CLI::App&) { return std::function<int()>(run_info); }});

}  // namespace
}  // namespace cohort::cli
