#include "cohort/collectives/allreduce_ring.h"

#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/collectives/ring.h"

namespace cohort::collectives {

AllreduceRing::AllreduceRing(Communicator& comm, void* data, size_t count, DataType dtype,
                             ReduceOp op)
    : comm_(comm), data_(static_cast<std::byte*>(data)), count_(count), dtype_(dtype), op_(op) {}

void AllreduceRing::run(Duration timeout) {
  Engine e(comm_, {OpKind::kAllReduce, dtype_, op_, Algo::kRing, -1, count_}, timeout);
  int n = e.size(), r = e.rank();
  if (n > 1) {
    Blocks b{count_, n};
    Stream& out = e.send((r + 1) % n);
    Stream& in = e.recv((r + n - 1) % n);
    out.reserve(2 * static_cast<size_t>(n));
    in.reserve(2 * static_cast<size_t>(n));
    const Piece* owned = add_ring_reduce_scatter(out, in, data_, b, e.elem(), r, 0);
    add_ring_all_gather(out, in, data_, b, e.elem(), ring_mod(r + 1, n), owned);
    e.run();
  }
  if (op_ == ReduceOp::kAvg) finish_avg(data_, count_, dtype_, n);
}

}  // namespace cohort::collectives
