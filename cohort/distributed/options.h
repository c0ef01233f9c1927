// Options of every ProcessGroup collective (PyTorch c10d's AllreduceOptions,
// BroadcastOptions, ...), the backend kinds, and the re-exported element
// types and reductions of the collectives layer.
//
// Every field has a default, so `pg.all_reduce(t)` is a sum with the group's
// timeout. async_op (PyTorch's name): true = the call returns at once and the
// Work completes later; false = the call returns when the op completed and
// throws its error itself (when the group is idle the op then runs on the
// calling thread, which saves the hand-off to the group's thread: the
// lowest latency for small messages). `timeout` of kUseDefaultTimeout (zero) means the group's
// timeout (ProcessGroupOptions::timeout); the op fails with cohort::TimeoutError naming the op, the
// group, the sequence number and the missing ranks when it runs past it (native backend; MPI calls
// cannot be timed out, see mpi/mpi_backend.h). Pure data; no thread-safety concerns.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/collectives/types.h"

namespace cohort::distributed {

using collectives::DataType;
using collectives::Duration;
using collectives::kUseDefaultTimeout;
using collectives::ReduceOp;

// Which implementation carries a group's collectives.
//  kNative: cohort's own collectives (shared memory / TCP, see docs/transports.md).
//  kMpi:    MPI_* calls on a duplicate of MPI_COMM_WORLD (built when COHORT_HAVE_MPI).
//  kNccl:   reserved; this build has no CUDA/NCCL, creating one throws NotSupported.
enum class BackendKind { kNative, kMpi, kNccl };

// "native", "mpi", "nccl".
std::string_view backend_name(BackendKind kind);
// Parses "native" | "mpi" | "nccl" (case-insensitive); InvalidArgument otherwise.
BackendKind parse_backend(std::string_view name);
// Whether this build can create groups of that kind.
bool backend_available(BackendKind kind);

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct BroadcastOptions {
  int root = 0;  // group rank
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // group rank
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct AllGatherOptions {
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct GatherOptions {
  int root = 0;
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct ScatterOptions {
  int root = 0;
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct AllToAllOptions {
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct BarrierOptions {
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

// send/recv: messages between two ranks arrive in the order sent; the tag
// must match on both sides (a different tag is reported as a mismatch).
struct SendOptions {
  uint32_t tag = 0;
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

struct RecvOptions {
  uint32_t tag = 0;
  Duration timeout = kUseDefaultTimeout;
  bool async_op = true;
};

}  // namespace cohort::distributed
