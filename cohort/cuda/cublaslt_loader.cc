// cuBLASLt, loaded on first use rather than at program start: the library is
// about 540 MB, and mapping it cost every process that links the CUDA layer
// (every cohort command, every worker, every test) 0.8 s and 220 MB of RSS
// whether or not it ever multiplied a matrix on a GPU. The cuBLASLt functions
// cohort calls are defined here with the header's signatures and forward to
// the library's, opened with dlopen the first time one is called.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "cohort/base/error.h"

namespace cohort::cuda {
namespace {

constexpr const char* kLibrary = "libcublasLt.so.13";

void* open_library() {
  static void* handle = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return;
    error = dlerror();
    // Beside the CUDA runtime this process loaded (the toolkit's lib folder,
    // which an installed program's search path may not name).
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) != 0 &&
        info.dli_fname != nullptr) {
      std::string dir(info.dli_fname);
      dir = dir.substr(0, dir.rfind('/') + 1);
      handle = dlopen((dir + kLibrary).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
  });
  if (handle == nullptr) {
    throw Error(
        fmt::format("cuBLASLt ({}) could not be loaded: {}; it comes with the CUDA 13 toolkit (or "
                    "PyTorch's nvidia-cublas package): put its folder on LD_LIBRARY_PATH",
                    kLibrary, error));
  }
  return handle;
}

void* symbol(const char* name) {
  void* p = dlsym(open_library(), name);
  if (p == nullptr) {
    throw Error(fmt::format("cuBLASLt ({}) has no {}: {}", kLibrary, name, dlerror()));
  }
  return p;
}

}  // namespace
}  // namespace cohort::cuda

// Each forwarder resolves its function once (a function-local static).
#define COHORT_CUBLASLT_FORWARD(name, params, args)                                        \
  extern "C" cublasStatus_t name params {                                                  \
    static const auto fn = reinterpret_cast<decltype(&name)>(cohort::cuda::symbol(#name)); \
    return fn args;                                                                        \
  }

COHORT_CUBLASLT_FORWARD(cublasLtCreate, (cublasLtHandle_t * handle), (handle))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulDescCreate,
                        (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute,
                         cudaDataType_t scale),
                        (desc, compute, scale))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute,
                        (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                         const void* buf, size_t size),
                        (desc, attr, buf, size))
COHORT_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate,
                        (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows,
                         uint64_t cols, int64_t ld),
                        (layout, type, rows, cols, ld))
COHORT_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
COHORT_CUBLASLT_FORWARD(cublasLtMatrixLayoutSetAttribute,
                        (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                         const void* buf, size_t size),
                        (layout, attr, buf, size))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
                        (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                         const void* buf, size_t size),
                        (pref, attr, buf, size))
COHORT_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
                        (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                         cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                         cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                         cublasLtMatmulHeuristicResult_t results[], int* returned),
                        (handle, op, a, b, c, d, pref, requested, results, returned))
COHORT_CUBLASLT_FORWARD(cublasLtMatmul,
                        (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                         const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                         cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                         cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                         const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream),
                        (handle, op, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo,
                         workspace, workspace_bytes, stream))

#undef COHORT_CUBLASLT_FORWARD
