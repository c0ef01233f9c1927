// NcclComm: the NCCL communicator calls the nccl backend makes, on raw device
// pointers and an opaque stream handle (`stream` is a cudaStream_t, the
// runtime's Stream::handle), so that the backend's ordering, watchdog and
// error handling are tested on the CPU against a double
// (fake_nccl_comm_testing.h) and the real communicator stays a thin layer
// over the library (nccl_comm_real.cc, built when COHORT_HAVE_NCCL).
//
// Every call enqueues work on `stream` and returns; none waits for the
// device. Counts are elements: all_gather's `count` is per rank (recv holds
// size()*count), reduce_scatter's is the recv count (send holds size()*count).
// all_to_all, gather and scatter are built by the backend from send/recv
// between group_start and group_end (NCCL's grouped point-to-point).
// Errors: an issue call that the library refuses throws cohort::Error naming
// the call and NCCL's message; a failure found later on the device or the
// network is returned by async_error().
// Thread safety: issue calls from one thread at a time (the group's);
// async_error() and abort() from any thread (the watchdog).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "cohort/collectives/types.h"
#include "cohort/rendezvous/store.h"

namespace cohort::distributed {

// ncclCommGetAsyncError, mapped: ok, or the failure with NCCL's text.
struct NcclAsyncError {
  bool ok = true;
  // A peer's failure (ncclRemoteError, ncclSystemError: a lost connection)
  // rather than this rank's own (ncclInternalError, ncclUnhandledCudaError).
  bool remote = false;
  std::string message;
};

class NcclComm {
 public:
  virtual ~NcclComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(const void* send, void* recv, size_t count, collectives::DataType dtype,
                          collectives::ReduceOp op, void* stream) = 0;
  virtual void broadcast(const void* send, void* recv, size_t count, collectives::DataType dtype,
                         int root, void* stream) = 0;
  virtual void reduce(const void* send, void* recv, size_t count, collectives::DataType dtype,
                      collectives::ReduceOp op, int root, void* stream) = 0;
  virtual void all_gather(const void* send, void* recv, size_t count, collectives::DataType dtype,
                          void* stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, size_t count,
                              collectives::DataType dtype, collectives::ReduceOp op,
                              void* stream) = 0;
  virtual void send(const void* data, size_t count, collectives::DataType dtype, int peer,
                    void* stream) = 0;
  virtual void recv(void* data, size_t count, collectives::DataType dtype, int peer,
                    void* stream) = 0;
  // Point-to-point calls between these two run as one operation (and cannot
  // deadlock on each other's order).
  virtual void group_start() = 0;
  virtual void group_end() = 0;

  virtual NcclAsyncError async_error() = 0;
  // Ends the communicator's outstanding work (kernels return, peers' matching
  // ops fail); later calls throw. Idempotent; any thread; bounded.
  virtual void abort() = 0;
};

// The real communicator of rank `rank` of `size` on CUDA device
// `device_index`: rank 0 makes NCCL's unique id and puts it in `store` under
// "cohort/nccl/<group>/unique_id", the others read it, and every rank calls
// ncclCommInitRankConfig (non-blocking) and polls it until done. Defined
// only in builds with NCCL (COHORT_HAVE_NCCL; nccl_comm_real.cc). Throws
// NotSupported naming libnccl.so.2 when the library cannot be loaded,
// TimeoutError naming the group and rank when the ranks
// do not meet within `timeout` (the communicator is aborted first), Error
// with NCCL's message otherwise.
std::unique_ptr<NcclComm> create_nccl_comm(rendezvous::Store& store, int rank, int size,
                                           int device_index, const std::string& group,
                                           collectives::Duration timeout);

}  // namespace cohort::distributed
