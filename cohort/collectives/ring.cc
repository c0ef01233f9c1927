#include "cohort/collectives/ring.h"

namespace cohort::collectives {

const Piece* add_ring_reduce_scatter(Stream& out, Stream& in, std::byte* buf, const Blocks& b,
                                     size_t elem, int rank, int shift) {
  const Piece* prev = nullptr;
  for (int s = 0; s < b.n - 1; ++s) {
    int si = ring_mod(rank + shift - s, b.n);
    int ri = ring_mod(rank + shift - s - 1, b.n);
    out.add(buf + b.offset(si) * elem, b.length(si) * elem, prev);
    prev = in.add(buf + b.offset(ri) * elem, b.length(ri) * elem, nullptr, /*reduce=*/true);
  }
  return prev;
}

void add_ring_all_gather(Stream& out, Stream& in, std::byte* buf, const Blocks& b, size_t elem,
                         int owned, const Piece* gate) {
  const Piece* prev = gate;
  for (int t = 0; t < b.n - 1; ++t) {
    int si = ring_mod(owned - t, b.n);
    int ri = ring_mod(owned - t - 1, b.n);
    out.add(buf + b.offset(si) * elem, b.length(si) * elem, prev);
    prev = in.add(buf + b.offset(ri) * elem, b.length(ri) * elem);
  }
}

}  // namespace cohort::collectives
