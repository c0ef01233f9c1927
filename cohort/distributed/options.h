// Options of every ProcessGroup collective (PyTorch c10d's AllreduceOptions,
// BroadcastOptions, ...), the backend kinds, and the re-exported element
// types and reductions of the collectives layer.
//
// Every field has a default, so `pg.all_reduce(t)` is a sum with the group's
// timeout. As in PyTorch, an op blocks unless async_op is asked for: the
// plain call returns when the op completed and throws its error itself (when
// the group is idle the op runs on the calling thread, which saves the
// hand-off to the group's thread: the lowest latency for small messages);
// with the async_op tag, `Work w = pg.all_reduce(t, {}, async_op);`, it
// returns a [[nodiscard]] Work at once and the op completes later (work.h).
// `timeout` of kUseDefaultTimeout (zero) means the group's timeout
// (ProcessGroupOptions::timeout); the op fails with cohort::TimeoutError
// naming the op, the group, the sequence number and the missing ranks when it
// runs past it (native backend; MPI calls cannot be timed out, see
// mpi/mpi_backend.h). Pure data; no thread-safety concerns.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/collectives/op_table.h"
#include "cohort/collectives/types.h"

namespace cohort::distributed {

using collectives::DataType;
using collectives::Duration;
using collectives::kUseDefaultTimeout;
using collectives::OpArgs;
using collectives::OpKind;
using collectives::ReduceOp;

// Which implementation carries a group's collectives.
//  kNative: cohort's own collectives (shared memory / TCP, see docs/transports.md).
//  kMpi:    MPI_* calls on a duplicate of MPI_COMM_WORLD (built when COHORT_HAVE_MPI).
//  kNccl:   NCCL on CUDA tensors (nccl/nccl_backend.h; the communicator needs
//           COHORT_HAVE_NCCL and a GPU, else creating one throws NotSupported).
enum class BackendKind { kNative, kMpi, kNccl };

// "native", "mpi", "nccl".
std::string_view backend_name(BackendKind kind);
// Parses "native" | "mpi" | "nccl" (case-insensitive); InvalidArgument otherwise.
BackendKind parse_backend(std::string_view name);
// Whether this build can create groups of that kind.
bool backend_available(BackendKind kind);

// Tag asking a ProcessGroup op not to block (PyTorch's async_op=True):
//   Work w = pg->all_reduce(grad, {.op = ReduceOp::kAvg}, async_op);
// A type, not a bool field, so that the Work of an async call, and only
// that one, is [[nodiscard]].
struct AsyncOp {
  explicit constexpr AsyncOp() = default;
};
inline constexpr AsyncOp async_op{};

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Duration timeout = kUseDefaultTimeout;
};

struct BroadcastOptions {
  int root = 0;  // group rank
  Duration timeout = kUseDefaultTimeout;
};

struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // group rank
  Duration timeout = kUseDefaultTimeout;
};

struct AllGatherOptions {
  Duration timeout = kUseDefaultTimeout;
};

struct GatherOptions {
  int root = 0;
  Duration timeout = kUseDefaultTimeout;
};

struct ScatterOptions {
  int root = 0;
  Duration timeout = kUseDefaultTimeout;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  Duration timeout = kUseDefaultTimeout;
};

struct AllToAllOptions {
  Duration timeout = kUseDefaultTimeout;
};

struct BarrierOptions {
  Duration timeout = kUseDefaultTimeout;
};

// send/recv: messages between two ranks arrive in the order sent; the tag
// must match on both sides (a different tag is reported as a mismatch).
struct SendOptions {
  uint32_t tag = 0;
  Duration timeout = kUseDefaultTimeout;
};

struct RecvOptions {
  uint32_t tag = 0;
  Duration timeout = kUseDefaultTimeout;
};

// The OpArgs of a call of op `kind` with options `o` (any of the structs
// above: the fields it has, op, root, tag and timeout, are taken; peer is
// the dst or src of send and recv).
template <typename Options>
OpArgs op_args(OpKind kind, const void* send, void* recv, size_t count, DataType dtype,
               const Options& o, int peer = 0) {
  OpArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  if constexpr (requires { o.op; }) a.op = o.op;
  if constexpr (requires { o.root; }) {
    a.root = o.root;
  } else {
    a.root = peer;
  }
  if constexpr (requires { o.tag; }) a.tag = o.tag;
  a.timeout = o.timeout;
  return a;
}

}  // namespace cohort::distributed
