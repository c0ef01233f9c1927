// Building blocks of the ring algorithms (internal): how a buffer of `count`
// elements splits into `n` blocks (the first count % n blocks one element
// longer, so any count works, 0 included), and the reduce-scatter and
// all-gather step sequences added to a send stream (to the right neighbour)
// and a receive stream (from the left one). Each step's send is gated on the
// previous step's receive, so blocks are forwarded while they arrive.
#pragma once

#include <cstddef>

#include "cohort/collectives/engine.h"

namespace cohort::collectives {

struct Blocks {
  size_t count;
  int n;
  size_t offset(int i) const {
    size_t base = count / static_cast<size_t>(n), rem = count % static_cast<size_t>(n);
    size_t u = static_cast<size_t>(i);
    return u * base + std::min(u, rem);
  }
  size_t length(int i) const {
    size_t base = count / static_cast<size_t>(n), rem = count % static_cast<size_t>(n);
    return base + (static_cast<size_t>(i) < rem ? 1 : 0);
  }
};

inline int ring_mod(int a, int n) { return ((a % n) + n) % n; }

// Afterwards this rank holds the full reduction of block ring_mod(rank + 1 + shift).
// Returns the last receive piece (that block), for gating what follows.
const Piece* add_ring_reduce_scatter(Stream& out, Stream& in, std::byte* buf, const Blocks& b,
                                     size_t elem, int rank, int shift);
// This rank starts holding block `owned` (complete once `gate` is done, or
// now when gate is null) and ends holding all blocks.
void add_ring_all_gather(Stream& out, Stream& in, std::byte* buf, const Blocks& b, size_t elem,
                         int owned, const Piece* gate);

}  // namespace cohort::collectives
