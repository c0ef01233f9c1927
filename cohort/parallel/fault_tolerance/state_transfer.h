// A replica's whole training state (a TensorDict: parameters, optimizer
// state, RNG and sampler state as tensors) sent from one rank of a group to
// another, for a replica that rejoins (replica_manager.h): no checkpoint is
// read. Point-to-point over the group: a header (the entries' names, dtypes
// and shapes), then each tensor's bytes. The receiver builds every tensor
// from the header, so it may hold no state of its own yet (a fresh
// replacement with no optimizer moments).
//
// Failure: a lost peer or a timeout propagates from the group's send/recv
// (PeerLost, TimeoutError); the receiver returns only a complete dict.
// Everything travels as tensors on `device`: the host for native, the
// group's GPU for nccl (which takes device buffers only); the received dict
// is on the host. Thread safety: the caller's.
#pragma once

#include "cohort/core/tensor_dict.h"
#include "cohort/distributed/process_group.h"

namespace cohort::parallel {

void send_state(distributed::ProcessGroup& pg, const TensorDict& state, int dst,
                Device device = Device());
TensorDict recv_state(distributed::ProcessGroup& pg, int src, Device device = Device());

}  // namespace cohort::parallel
