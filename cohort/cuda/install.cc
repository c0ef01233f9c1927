#include "cohort/cuda/kernels.h"
#include "cohort/cuda/runtime.h"

// Referenced by the linker option on cohort_cuda (CMakeLists.txt), so that this
// member, and the registration below, are part of every program that links the
// layer.
extern "C" void cohort_cuda_install() { cohort::cuda::install(); }

namespace {
// Runs at load: core finds the CUDA runtime and kernels before main().
const bool g_installed = (cohort_cuda_install(), true);
}  // namespace
