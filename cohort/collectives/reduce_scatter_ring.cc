#include "cohort/collectives/reduce_scatter_ring.h"

#include <cstring>

#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/collectives/ring.h"

namespace cohort::collectives {

ReduceScatterRing::ReduceScatterRing(Communicator& comm, const void* send, void* recv, size_t count,
                                     DataType dtype, ReduceOp op)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype),
      op_(op) {}

void ReduceScatterRing::run(Duration timeout) {
  Engine e(comm_, {OpKind::kReduceScatter, dtype_, op_, Algo::kRing, -1, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t elem = e.elem();
  size_t bytes = count_ * elem;
  size_t total = bytes * static_cast<size_t>(n);
  std::byte* buf = comm_.scratch(total);
  if (total > 0) std::memcpy(buf, send_, total);
  if (n > 1) {
    Blocks b{count_ * static_cast<size_t>(n), n};
    // shift -1: rank r finishes block r.
    Stream& out = e.send((r + 1) % n);
    Stream& in = e.recv((r + n - 1) % n);
    out.reserve(static_cast<size_t>(n));
    in.reserve(static_cast<size_t>(n));
    add_ring_reduce_scatter(out, in, buf, b, elem, r, -1);
    e.run();
  }
  if (bytes > 0) std::memcpy(recv_, buf + static_cast<size_t>(r) * bytes, bytes);
  if (op_ == ReduceOp::kAvg) finish_avg(recv_, count_, dtype_, n);
}

}  // namespace cohort::collectives
