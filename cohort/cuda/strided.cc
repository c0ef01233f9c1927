#include "cohort/cuda/strided.h"

#include "cohort/base/error.h"

namespace cohort::cuda {

void throw_too_many_dims(const char* op, int ndim) {
  throw NotSupported(fmt::format(
      "{}: the CUDA kernel takes at most {} dims after merging the contiguous ones, got {}; "
      "make the operands contiguous first",
      op, kMaxDims, ndim));
}

void throw_dtype(const char* op, DType t) {
  throw NotSupported(
      fmt::format("{}: dtype {} is not supported on CUDA devices", op, dtype_name(t)));
}

}  // namespace cohort::cuda
