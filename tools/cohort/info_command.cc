// `cohort info`: version, BLAS, thread count, optional backends.
#include <cblas.h>

#include <cstdio>

#include "cohort/base/config.h"
#include "cohort/base/parallel.h"
#include "tools/cohort/command.h"

extern "C" char* openblas_get_config(void);

namespace cohort::cli {
namespace {

int run_info() {
  std::printf("cohort %s\n", COHORT_VERSION);
  std::printf("blas: OpenBLAS (%s)\n", openblas_get_config());
  std::printf("threads: %d\n", num_threads());
  std::printf("backends: native%s%s\n", COHORT_HAVE_MPI ? ", mpi" : "",
              COHORT_HAVE_NCCL ? ", nccl" : "");
  return 0;
}

CommandRegistrar reg({"info", "Print version, BLAS, thread count and built backends",
                      [](CLI::App&) { return std::function<int()>(run_info); }});

}  // namespace
}  // namespace cohort::cli
