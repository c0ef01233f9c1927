#include "cohort/core/native/vec_kernels.h"

#include "cohort/base/cpu.h"
#include "cohort/base/isa.h"

namespace cohort::native {

COHORT_ISA_DECLARE_TABLE(VecKernels, kVecKernels)

const VecKernels* vec_kernels() { return COHORT_ISA_TABLE(VecKernels, nullptr, kVecKernels); }

}  // namespace cohort::native
