#include "cohort/collectives/reduce_ring.h"

#include <cstring>

#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/collectives/ring.h"

namespace cohort::collectives {

ReduceRing::ReduceRing(Communicator& comm, void* data, size_t count, DataType dtype, ReduceOp op,
                       int root)
    : comm_(comm),
      data_(static_cast<std::byte*>(data)),
      count_(count),
      dtype_(dtype),
      op_(op),
      root_(root) {}

void ReduceRing::run(Duration timeout) {
  Engine e(comm_, {OpKind::kReduce, dtype_, op_, Algo::kRing, root_, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t elem = e.elem();
  if (n > 1) {
    Blocks b{count_, n};
    // The root works in place (its buffer receives the result anyway);
    // others on a copy so their input stays unchanged.
    std::byte* buf = data_;
    if (r != root_) {
      buf = comm_.scratch(count_ * elem);
      if (count_ > 0) std::memcpy(buf, data_, count_ * elem);
    }
    Stream& out = e.send((r + 1) % n);
    Stream& in = e.recv((r + n - 1) % n);
    out.reserve(static_cast<size_t>(n));
    in.reserve(static_cast<size_t>(n));
    add_ring_reduce_scatter(out, in, buf, b, elem, r, 0);
    e.run();
    // Rank p now holds block p+1; the root collects them.
    if (r != root_) {
      int blk = ring_mod(r + 1, n);
      e.send(root_).add(buf + b.offset(blk) * elem, b.length(blk) * elem);
    } else {
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        int blk = ring_mod(p + 1, n);
        e.recv(p).add(data_ + b.offset(blk) * elem, b.length(blk) * elem);
      }
    }
    e.run();
  }
  if (r == root_ && op_ == ReduceOp::kAvg) finish_avg(data_, count_, dtype_, n);
}

}  // namespace cohort::collectives
