#include "cohort/core/native/vec_kernels.h"

#include "cohort/base/cpu.h"

namespace cohort::native {

#if defined(__x86_64__)
namespace isa_avx2 {
extern const VecKernels kVecKernels;
}
namespace isa_avx512 {
extern const VecKernels kVecKernels;
}
#endif

const VecKernels* vec_kernels() {
  switch (kernel_path()) {
#if defined(__x86_64__)
    case KernelPath::kAvx512:
      return &isa_avx512::kVecKernels;
    case KernelPath::kAvx2:
      return &isa_avx2::kVecKernels;
#endif
    default:
      return nullptr;
  }
}

}  // namespace cohort::native
