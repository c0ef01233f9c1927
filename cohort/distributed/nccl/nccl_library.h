// The NCCL library, opened on first use rather than linked: libnccl.so.2 is
// about 220 MB, and every process linking cohort would map it at start
// whether or not it ever made a communicator (as cohort/cuda/cublaslt_loader.cc
// does for cuBLASLt). Only nccl_comm_real.cc uses it; built when
// COHORT_HAVE_NCCL. Thread safety: nccl_library() is safe from any thread;
// the table it returns is immutable.
#pragma once

#include <nccl.h>

namespace cohort::distributed::detail {

// The functions cohort calls, resolved from the opened library.
struct NcclLibrary {
  decltype(&ncclGetVersion) get_version;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config;
  decltype(&ncclCommFinalize) comm_finalize;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommAbort) comm_abort;
  decltype(&ncclCommGetAsyncError) comm_get_async_error;
  decltype(&ncclGetErrorString) get_error_string;
  decltype(&ncclGetLastError) get_last_error;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclReduce) reduce;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  int version = 0;  // ncclGetVersion's code, e.g. 22809 for 2.28.9
};

// Opens libnccl.so.2 (the loader's search path, then beside the CUDA runtime
// this process loaded, then where the build found it) once per process and
// resolves every function. Throws NotSupported naming the library, the
// places tried and dlerror's text when it cannot be opened or lacks a function.
const NcclLibrary& nccl_library();

}  // namespace cohort::distributed::detail
