// The communication ops of tensor (intra-op) parallelism, as Megatron-LM's
// "f" and "g" functions (megatron/core/tensor_parallel/mappings.py). Each is
// an autograd op over a tensor-parallel ProcessGroup `tp` whose ranks all
// hold the same activations outside a parallel region:
//
//   copy_to_tensor_parallel_region      forward: identity      backward: all-reduce (sum)
//   reduce_from_tensor_parallel_region  forward: all-reduce    backward: identity
//   gather_from_tensor_parallel_region  forward: all-gather    backward: own slice
//                                       along the last dim
//   scatter_to_tensor_parallel_region   forward: own slice     backward: all-gather
//                                       of the last dim        along the last dim
//
// Shapes: with p = tp->size() and r = tp->rank(), gather maps [..., k] to
// [..., p*k] (rank j's part at columns [j*k, (j+1)*k)); scatter maps
// [..., p*k] to [..., k] (columns [r*k, (r+1)*k)). A last dim not divisible by
// p throws InvalidArgument naming the op, the rank and both numbers.
//
// Collectives: every call and every backward through it is one blocking
// collective on tp (the identity directions communicate nothing), so every
// rank of tp must run the same ops in the same order, as with any
// ProcessGroup op; a failure of the group (a lost peer, a timeout) is thrown
// by the call or by backward() with the group's message, which names the op,
// the group and the rank. The backward closures keep tp alive.
// Thread safety: as the ProcessGroup's (one issuing thread per group keeps
// the order the same on every rank).
#pragma once

#include <cstdint>
#include <memory>

#include "cohort/core/tensor.h"
#include "cohort/distributed/process_group.h"

namespace cohort::parallel {

Tensor copy_to_tensor_parallel_region(const Tensor& x,
                                      const std::shared_ptr<distributed::ProcessGroup>& tp);
Tensor reduce_from_tensor_parallel_region(const Tensor& x,
                                          const std::shared_ptr<distributed::ProcessGroup>& tp);
Tensor gather_from_tensor_parallel_region(const Tensor& x,
                                          const std::shared_ptr<distributed::ProcessGroup>& tp);
Tensor scatter_to_tensor_parallel_region(const Tensor& x,
                                         const std::shared_ptr<distributed::ProcessGroup>& tp);

// Sequence parallelism (Megatron-LM's), along dim 1 of [B, T, ...] with T
// divisible by p (InvalidArgument otherwise), rank r holding positions
// [r T/p, (r+1) T/p):
//   gather_from_sequence_parallel_region       forward: all-gather [B, T/p, ..] -> [B, T, ..]
//                                              backward: reduce-scatter (sum)
//   reduce_scatter_to_sequence_parallel_region forward: reduce-scatter (sum) of partial
//                                              sums [B, T, ..] -> own [B, T/p, ..]
//                                              backward: all-gather
Tensor gather_from_sequence_parallel_region(const Tensor& x,
                                            const std::shared_ptr<distributed::ProcessGroup>& tp);
Tensor reduce_scatter_to_sequence_parallel_region(
    const Tensor& x, const std::shared_ptr<distributed::ProcessGroup>& tp);

// ---- the same movements without autograd (for state dicts and tests) ----

// All ranks' x (same shape on every rank) concatenated along dim, in rank
// order: [.., s_dim, ..] -> [.., p*s_dim, ..]. Blocking collective. With
// blocks = k, each x is k blocks along dim and the result is block 0 of
// every rank in rank order, then block 1 of every rank, ... (the inverse of
// shard_along_dim with the same blocks).
Tensor all_gather_along_dim(const Tensor& x, int64_t dim, distributed::ProcessGroup& tp,
                            int64_t blocks = 1);
// The sum over the ranks of x (the same shape on every rank), this rank's
// piece of it along dim: [.., s, ..] -> [.., s/p, ..]. Blocking collective.
Tensor reduce_scatter_along_dim(const Tensor& x, int64_t dim, distributed::ProcessGroup& tp);
// Rank `rank`'s part of x split into `parts` equal pieces along dim (a
// contiguous copy); InvalidArgument when the size is not divisible. With
// blocks = k: x is k equal blocks along dim (q | k | v), each cut into
// `parts` pieces, and the result is piece `rank` of every block, in order.
Tensor shard_along_dim(const Tensor& x, int64_t dim, int rank, int parts, int64_t blocks = 1);

}  // namespace cohort::parallel
